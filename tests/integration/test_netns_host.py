"""The netns "remote host": a real sshd in its own network namespace, reached with Machine over ssh."""

from __future__ import annotations

import os
import time

import pytest

from tests.integration.netns_host import netns_host
from vmharness.errors import HarnessError
from vmharness.system import proc
from vmharness.system.machine import SSH_CONFIG_ENV, Machine

pytestmark = pytest.mark.integration

INDEX = 241  # 198.19.241.0/24; another test module must pick another index


def test_a_command_runs_in_the_namespace_over_ssh_and_everything_goes_away(monkeypatch: pytest.MonkeyPatch) -> None:
    start = time.monotonic()
    with netns_host("nstest", INDEX) as host:
        assert (host.name, host.netns, host.address, host.root_address) == \
            ("nstest", "vmh-nstest", f"198.19.{INDEX}.2", f"198.19.{INDEX}.1")
        assert os.readlink(f"/proc/{host.sshd_pid}/exe") == "/usr/sbin/sshd"
        monkeypatch.setenv(SSH_CONFIG_ENV, str(host.ssh_config))
        res = Machine(host.name).run(["cat", "/proc/net/dev"], timeout=30)
        devices = {line.split(":")[0].strip() for line in res.stdout.splitlines() if ":" in line}
        assert devices == {"lo", f"vmhn{INDEX}"}, res.stdout  # the namespace's NICs, not this machine's
        here = proc.run(["cat", "/proc/net/dev"], timeout=10).stdout
        assert f"vmhr{INDEX}:" in here and f"vmhn{INDEX}:" not in here
        config, pid = host.ssh_config, host.sshd_pid
    print(f"netns host up, one command, down: {time.monotonic() - start:.2f} s")
    assert "vmh-nstest" not in proc.run(["ip", "netns", "list"], timeout=10).stdout.split()
    assert not proc.run(["ip", "link", "show", f"vmhr{INDEX}"], timeout=10, check=False).ok
    assert not os.path.exists(f"/proc/{pid}")
    assert not config.parent.exists()


def test_the_same_name_twice_is_refused_and_the_first_survives(monkeypatch: pytest.MonkeyPatch) -> None:
    with netns_host("nsdup", INDEX) as host:
        with pytest.raises(HarnessError, match="vmh-nsdup exists already"), netns_host("nsdup", INDEX + 1):
            pass
        with pytest.raises(HarnessError, match=f"vmhr{INDEX} exists already"), netns_host("nsother", INDEX):
            pass
        monkeypatch.setenv(SSH_CONFIG_ENV, str(host.ssh_config))
        assert Machine(host.name).run(["true"], timeout=30).ok  # the refusals took nothing away
    assert "vmh-nsdup" not in proc.run(["ip", "netns", "list"], timeout=10).stdout.split()
    assert "vmh-nsother" not in proc.run(["ip", "netns", "list"], timeout=10).stdout.split()


def test_a_machine_reads_its_ssh_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SSH_CONFIG_ENV, "/tmp/cfg")
    assert Machine("h").argv(["a b"]) == ["ssh", "-F", "/tmp/cfg", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                          "--", "h", "env LC_ALL=C 'a b'"]
    monkeypatch.delenv(SSH_CONFIG_ENV)
    assert Machine("h").argv(["x"])[:2] == ["ssh", "-o"]
