"""The system call counter ([explain] syscalls, bench/syscalls.py) in a real guest under TCG, against a
known answer: `dd bs=1 count=N` makes N reads and N writes and a few more of each to start, so the
kernel's histogram must hold N to N+10 writes (and N to N+40 reads) for dd's process and none for one that
was not running; the trigger is gone after the read; a read with the trigger on splits the count between
what ran before it and after. The whole pipeline (a run's counted points and the
report's calls per request) is checked in tests/integration/test_experiment.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from vmharness.bench import syscalls
from vmharness.guest import ssh
from vmharness.host.libvirt import daemon as libvirtd
from vmharness.system import proc
from vmharness.system.machine import Machine

pytestmark = [pytest.mark.integration, pytest.mark.vm]

N = 20000


def vmh(*args: str) -> proc.Result:
    return proc.run([sys.executable, "-m", "vmharness.cli", *args], timeout=600, check=False)


@pytest.fixture(scope="module")
def guest() -> Iterator[dict[str, object]]:
    with libvirtd.running():
        # the minimal init: what is counted is dd's calls, and systemd's boot cost 10 s more here
        res = vmh("vm", "up", "--name", "calls", "--memory", "768", "--init", "minimal", "--json")
        assert res.ok, res.stderr + res.stdout
        try:
            yield json.loads(res.stdout)
        finally:
            down = vmh("vm", "down", "calls")
            assert down.ok, down.stderr


@pytest.fixture(scope="module")
def machine(guest: dict[str, object]) -> Machine:
    link = guest["link"]  # `vm up` authorized the harness's key with its link, as a run's boot does
    assert isinstance(link, dict)
    return ssh.machine(str(link["guest"]).split("/")[0], "qemu:///system", bool(guest["kvm"]))


# the shell prints its PID, then becomes dd (exec keeps the PID), which makes N writes of one byte
DD = 'echo $$; sleep "$1"; exec dd if=/dev/zero of=/dev/null bs=1 count="$2" 2>/dev/null'


def test_a_known_number_of_calls_is_counted_for_its_process_alone(machine: Machine) -> None:
    m = machine
    syscalls.start(m)
    try:
        res = m.run(["sh", "-c", DD, "sh", "0", str(N)], timeout=300)
    finally:
        counts, stats = syscalls.stop(m)
    pid = int(res.stdout.split()[0])
    dd = {name: n for (p, name), n in counts.calls.items() if p == pid}
    assert N <= dd["write"] <= N + 10 and N <= dd["read"] <= N + 40, dd  # + the loader's and locale's reads
    assert counts.dropped == 0 and counts.hits >= 2 * N
    assert syscalls.of(counts, {pid})["write"] == dd["write"]
    assert syscalls.of(counts, {999_999}) == {}  # no such process: nothing
    assert "1 (" in stats  # every process's stat line came back with the histogram
    trigger = m.run(["cat", f"{syscalls.EVENT}/trigger"], timeout=30).stdout
    assert "hist:" not in trigger.replace("# Available triggers:", ""), trigger  # the trigger is gone


def test_a_read_between_two_processes_separates_their_calls(machine: Machine) -> None:
    """What a counted point does between its shorter load and its own: the histogram read with the
    trigger left on; the calls after the read are the later count less it (syscalls.between)."""
    m = machine
    syscalls.start(m)
    try:
        before = int(m.run(["sh", "-c", DD, "sh", "0", "2000"], timeout=300).stdout.split()[0])
        first = syscalls.read(m)
        after = int(m.run(["sh", "-c", DD, "sh", "0", str(N)], timeout=300).stdout.split()[0])
    finally:
        whole, _ = syscalls.stop(m)
    later = syscalls.between(first, whole)
    assert 2000 <= first.calls[(before, "write")] <= 2010 and (after, "write") not in first.calls
    assert N <= later.calls[(after, "write")] <= N + 10 and (before, "write") not in later.calls
    assert later.hits == whole.hits - first.hits
