"""The system call counter ([explain] syscalls, bench/syscalls.py) in a real guest under TCG, against a
known answer: `dd bs=1 count=N` makes N reads and N writes and a few more of each to start, so the
kernel's histogram must hold N to N+10 writes (and N to N+40 reads) for dd's process and none for one that
was not running; the trigger is gone after the read. The whole pipeline (a run's counted points and the
report's calls per request) is checked in tests/integration/test_experiment.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from vmharness.bench import syscalls
from vmharness.guest import ssh
from vmharness.host.libvirt import api
from vmharness.host.libvirt import daemon as libvirtd
from vmharness.system import proc

pytestmark = [pytest.mark.integration, pytest.mark.vm]

N = 20000


def vmh(*args: str) -> proc.Result:
    return proc.run([sys.executable, "-m", "vmharness.cli", *args], timeout=600, check=False)


@pytest.fixture(scope="module")
def guest() -> Iterator[dict[str, object]]:
    with libvirtd.running():
        res = vmh("vm", "up", "--name", "calls", "--memory", "768", "--json")
        assert res.ok, res.stderr + res.stdout
        try:
            yield json.loads(res.stdout)
        finally:
            down = vmh("vm", "down", "calls")
            assert down.ok, down.stderr


def test_a_known_number_of_calls_is_counted_for_its_process_alone(guest: dict[str, object]) -> None:
    link = guest["link"]
    assert isinstance(link, dict)
    conn = api.connect("qemu:///system")
    try:  # the harness's key into the guest, as a run's session puts it
        ssh.authorize(conn.lookupByName("vmh-calls"), timeout=120)
    finally:
        conn.close()
    m = ssh.machine(str(link["guest"]).split("/")[0], "qemu:///system", bool(guest["kvm"]))
    syscalls.start(m)
    try:
        # the shell prints its PID, then becomes dd (exec keeps the PID)
        res = m.run(["sh", "-c", 'echo $$; exec dd if=/dev/zero of=/dev/null bs=1 count="$1" 2>/dev/null',
                     "sh", str(N)], timeout=300)
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
