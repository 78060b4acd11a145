"""The netns "remote host": a real sshd in its own network namespace, reached with Machine over ssh."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.netns_host import netns_host
from tests.integration.netns_records import NETNS_DIR, RECORDS
from vmharness.errors import HarnessError
from vmharness.system import proc
from vmharness.system.machine import SSH_CONFIG_ENV, Machine, alive

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


KILLED_RUN = """
import sys, time
from tests.integration.netns_host import netns_host
with netns_host("nskill", int(sys.argv[1])) as host:
    print(host.sshd_pid, host.ssh_config.parent, flush=True)
    time.sleep(600)
"""


def test_a_killed_runs_namespace_is_given_back_and_one_not_of_these_tests_stays(
        caplog: pytest.LogCaptureFixture) -> None:
    """A run killed inside netns_host leaves its namespace, sshd and temp dir; the next netns_host gives
    them back. Controls: while the maker runs, its namespace is in use and stays; a namespace with no
    record (not made by these tests) stays, and its name is refused."""
    root, here = Path(__file__).resolve().parents[2], Machine()
    maker = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(INDEX + 2)], cwd=root, stdout=subprocess.PIPE,
                             text=True)
    proc.run(["ip", "netns", "add", "vmh-nsforeign"], timeout=30)
    try:
        assert maker.stdout is not None
        pid_text, tmp_text = maker.stdout.readline().split()
        sshd, tmp = int(pid_text), Path(tmp_text)
        with pytest.raises(HarnessError, match="vmh-nskill exists already"), netns_host("nskill", INDEX + 4):
            pass
        assert alive(here, sshd) and (RECORDS / "vmh-nskill").is_file()  # its maker is at work
        maker.send_signal(signal.SIGKILL)
        maker.wait(timeout=30)
        assert (NETNS_DIR / "vmh-nskill").exists() and alive(here, sshd) and tmp.is_dir()

        with caplog.at_level(logging.WARNING), netns_host("nskill", INDEX + 2) as host:
            assert host.sshd_pid != sshd
        assert "giving back network namespace vmh-nskill, left by a killed run" in caplog.text
        assert not alive(here, sshd) and not tmp.exists()  # a zombie until init reaps it
        assert not (NETNS_DIR / "vmh-nskill").exists() and not (RECORDS / "vmh-nskill").exists()

        assert (NETNS_DIR / "vmh-nsforeign").exists() and not (RECORDS / "vmh-nsforeign").exists()
        with pytest.raises(HarnessError, match="vmh-nsforeign exists already"), netns_host("nsforeign", INDEX + 3):
            pass
        assert (NETNS_DIR / "vmh-nsforeign").exists()
    finally:
        maker.kill()
        maker.wait(timeout=30)
        proc.run(["ip", "netns", "delete", "vmh-nsforeign"], timeout=30, check=False)


def test_a_machine_reads_its_ssh_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SSH_CONFIG_ENV, "/tmp/cfg")
    assert Machine("h").argv(["a b"]) == ["ssh", "-F", "/tmp/cfg", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                          "--", "h", "env LC_ALL=C 'a b'"]
    monkeypatch.delenv(SSH_CONFIG_ENV)
    assert Machine("h").argv(["x"])[:2] == ["ssh", "-o"]
