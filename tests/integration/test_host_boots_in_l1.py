"""Host boots for real: the rig's L1 is the host, and `vmharness run --allow-host-reboot` reboots it
with kexec. Nothing here reboots the machine the tests run on: kexec runs inside L1 alone (a rig of
the test's own, `l1_that_reboots`, with kexec-tools unpacked for it and a folder it keeps across
boots: tests/rig/topology.py PERSIST_TAG).

One round of two host boots: the boot L1 started in, measuring an L2 under KVM there; a switch to the
same kernel with `spectre_v2=off` added, measuring an L2 in it; and home, to the boot L1 started in.
L1 has no systemd, so after each boot the test does what docs/run.md says to do there: it runs
`vmharness run --resume RUN_DIR` (after what L1's boot emptied is set up again: libvirt's settings,
tun, kvm_amd). At the end L1 is in a boot with the command line it started with, and nothing of the
run is left: no state file, no journal, no kernel loaded for kexec."""

from __future__ import annotations

import json
import time
import warnings
from typing import Any

import pytest

from tests.integration.conftest import BOOT_TIMEOUT
from tests.integration.test_run_nested import font_list, in_l1, libvirt_in_l1, read_json_lines
from tests.rig import Rig, l2root
from tests.rig.rig import Wedged
from vmharness.errors import HarnessError

pytestmark = [pytest.mark.integration, pytest.mark.vm, pytest.mark.slow]

RUNS = "/var/lib/vmharness/runs"  # kept across L1's boots (the rig's persistent folder, bound there)
RUN = f"{RUNS}/hb"
CONFIG = f"{RUNS}/hb.toml"
MPL = f"{RUNS}/mpl"
STATE = "/var/lib/vmharness/hostboots/state.json"
L2_MIB = 384
SWITCH = 900.0  # seconds from a command's start to L1's next boot: an L2 booted and measured, then kexec


def config(rig: Rig) -> str:
    # no tuning on either side: each knob costs L1 and L2 seconds, and the host boots are what is tested
    l2 = ('cmdline = "quiet cryptomgr.notests rodata=off mitigations=off"\nprofile = "none"\n'
          f'kernel = "{rig.kernel.boot_image}"\ninitrd = "{l2root.build(rig.kernel)}"\n')
    return (f'[guest]\nmemory = {L2_MIB}\nvcpus = 1\ninit = "minimal"\nboot_timeout = 900\naccel = "kvm"\n'
            '[[host_boot]]\nname = "v2-off"\ncmdline = "spectre_v2=off"\n'
            f'[[instance]]\nname = "stock"\n{l2}'
            f'[[instance]]\nname = "v2-off"\nhost_boot = "v2-off"\n{l2}'
            '[[client]]\nhost = "local"\nthreads = 1\n'
            '[sweep]\nconnections = "4"\niterations = 1\nduration = 3\nwarmup = 0\nwait = 0\n'
            '[load]\npercents = []\ncapacity = 0\n'
            '[samplers]\ninterval = 5.0\n[tuning]\nprofile = "none"\n')


def set_up(rig: Rig) -> None:
    """What a boot of L1 empties and the run needs: libvirt's settings for L1, tun, kvm_amd."""
    libvirt_in_l1(rig)
    assert in_l1(rig, "sh", "-c", "modprobe kvm_amd && test -c /dev/kvm").ok


def vmharness(rig: Rig, *args: str) -> list[str]:
    """The harness's command in L1 with a libvirtd of its own (vmharness.host.libvirt.daemon)."""
    python = str(rig.repo / ".venv/bin/python")
    return [python, "-m", "vmharness.host.libvirt.daemon", str(rig.repo / ".venv/bin/vmharness"), *args]


def started(rig: Rig, argv: list[str], log: str) -> int:
    """argv started in L1 in a session of its own, its output into `log`: a switch reboots L1 under it,
    so it cannot be waited for through the agent. Its pid."""
    line = 'setsid "$@" </dev/null >"$LOG" 2>&1 & echo $!'
    res = in_l1(rig, "sh", "-c", line, "sh", *argv, env={"LOG": log, "MPLCONFIGDIR": MPL}, timeout=60)
    assert res.ok, res.stderr
    return int(res.stdout.strip())


def switched(rig: Rig, before: str, pid: int, log: str) -> float:
    """Seconds until L1 came back in another boot; the command's output if it ended without a switch."""
    def going() -> None:
        if in_l1(rig, "test", "-d", f"/proc/{pid}", timeout=60).returncode != 0:
            raise AssertionError(f"the run ended without switching the host:\n{said_so_far(rig, log)}")
    try:
        return rig.await_boot(before, SWITCH, going)
    except Wedged:
        raise
    except HarnessError as exc:
        raise AssertionError(f"{exc.message}\n{exc.hint}\n{said_so_far(rig, log)}") from None


def said_so_far(rig: Rig, log: str) -> str:
    """The run's output and its host boots' log, as far as L1 still gives them: for a run that ended
    without a switch, or a switch that did not come."""
    parts = []
    for path in (log, f"{RUN}/hostboots.log"):
        try:
            parts.append(f"--- {path} ---\n" + rig.read_file(path, timeout=30).decode(errors="replace")[-3000:])
        except HarnessError as exc:
            parts.append(f"--- {path}: not read: {exc.message} ---")
    return "\n".join(parts)


def proc_cmdline(rig: Rig) -> str:
    return rig.read_file("/proc/cmdline").decode().strip()


def test_a_run_goes_round_two_host_boots_of_l1_with_kexec_and_comes_home(l1_that_reboots: Rig) -> None:
    """Once more on a fresh L1 only where L1 wedged (tests/rig/rig.Wedged: the rig under TCG, not the run),
    which is printed with L1's console; a second wedge, or any other failure, is the test's."""
    try:
        go_round(l1_that_reboots)
    except Wedged as exc:
        print(f"L1 wedged; the whole test once more on a fresh L1:\n{exc.message}\n{exc.hint}")
        # in the log's warnings summary, also where the test passes (pytest drops a passing test's prints)
        warnings.warn(f"L1 wedged, the test went round once more on a fresh L1: {exc.message.splitlines()[0]}",
                      stacklevel=1)
        l1_that_reboots.stop()
        with Rig.start(timeout=BOOT_TIMEOUT, host_boots=True) as fresh:
            go_round(fresh)


def go_round(rig: Rig) -> None:
    began = time.monotonic()
    set_up(rig)
    font_list(rig, MPL)
    rig.put_file(CONFIG, config(rig).encode())
    first_boot, first_line = rig.boot_id(), proc_cmdline(rig)
    pid = started(rig, vmharness(rig, "run", CONFIG, "--allow-host-reboot", "--out", RUN), f"{RUNS}/1.log")
    to_v2_off = switched(rig, first_boot, pid, f"{RUNS}/1.log")
    second_boot, second_line = rig.boot_id(), proc_cmdline(rig)
    assert second_line == f"{first_line} spectre_v2=off", second_line
    spectre_v2 = rig.read_file("/sys/devices/system/cpu/vulnerabilities/spectre_v2").decode().strip()
    print(f"L1 came back in the host boot v2-off {to_v2_off:.0f} s after the run started: spectre_v2: {spectre_v2}")

    set_up(rig)
    pid = started(rig, vmharness(rig, "run", "--resume", RUN), f"{RUNS}/2.log")
    home = switched(rig, second_boot, pid, f"{RUNS}/2.log")
    assert proc_cmdline(rig) == first_line
    print(f"L1 came home {home:.0f} s after the resumed run started")

    set_up(rig)
    last = in_l1(rig, *vmharness(rig, "run", "--resume", RUN), timeout=1200, env={"MPLCONFIGDIR": MPL})
    log = rig.read_file(f"{RUN}/hostboots.log").decode(errors="replace")
    print(log[-4000:], last.stdout[-2000:], last.stderr[-2000:], sep="\n")
    assert last.returncode == 0, last.stderr[-3000:]
    print(f"two host boots and home in {time.monotonic() - began:.0f} s")

    manifest: dict[str, Any] = json.loads(rig.read_file(f"{RUN}/manifest.json"))
    assert manifest["host_boots_done"] is True
    visits = [(b["boot"], b["instances"], b["cmdline"]) for b in manifest["host_boots"]]
    assert visits == [("", ["stock"], first_line), ("v2-off", ["v2-off"], second_line)], visits
    # each host boot's facts, as the arrival check read them: two boots, and what each said of spectre_v2
    (start, v2_off) = manifest["host_boots"]
    assert (start["boot_id"].strip(), v2_off["boot_id"].strip()) == (first_boot, second_boot)
    assert v2_off["vulnerabilities"]["spectre_v2"].strip() == spectre_v2
    print(f"spectre_v2 in L1: {start['vulnerabilities']['spectre_v2']!r}, with spectre_v2=off {spectre_v2!r}")
    points = [r for r in read_json_lines(rig, f"{RUN}/records.jsonl") if r["kind"] == "measurement"]
    assert sorted(r["instance"] for r in points) == ["stock", "v2-off"]
    assert all(r["ok"] and r["client"]["requests"] > 0 for r in points), points
    assert in_l1(rig, "test", "-e", STATE).returncode == 1  # the state file went with the run
    assert in_l1(rig, "test", "-e", "/run/vmharness/journal.jsonl").returncode == 1
    assert rig.read_file("/sys/kernel/kexec_loaded").decode().strip() == "0"
    assert rig.boot_id() not in (first_boot, second_boot)
