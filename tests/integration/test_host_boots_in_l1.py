"""Host boots for real: the rig's L1 is the host, and `vmharness run --allow-host-reboot` reboots it
with kexec. Nothing here reboots the machine the tests run on: kexec runs inside L1 alone (a rig of
the test's own, `l1_that_reboots`, with kexec-tools unpacked for it and a folder it keeps across
boots: tests/rig/topology.py PERSIST_TAG).

An attribution study of two host switches and a second host kernel, one round: the reference `stock`
measures an L2 under KVM in the boot L1 started in (bookworm's 6.1); `k73` is a host boot of another
kernel, Debian's trixie-backports (7.3 in December 2026, tests/rig/kernel_index.py) with its
attack-vector switch `mitigations=auto,no_guest_host`, measuring the same L2 under that kernel's KVM;
`spectre_v2` turned off on L1's command line is a host boot of the kernel the run started in, measuring
an L2 in it; `spec_store_bypass_disable` turned off is a host boot whose L1 reports what the
reference's did (L1's CPU has no SSBD to turn on: under QEMU 10.0's `-cpu max` "Vulnerable" either way,
under 7.2's "Not affected"; tests/rig/topology.l1_qemu), so its switch is dropped there, unmeasured;
then home, from 6.1 with spectre_v2=off, to the boot L1 started in. L1 has no systemd, so after each
boot the test does what docs/run.md says to do there: it runs `vmharness run --resume RUN_DIR` (after
what L1's boot emptied is set up again: libvirt's settings, tun, kvm_amd, from the running kernel's
modules). At the end L1 is in a boot with the command line it
started with, and nothing of the run is left: no state file, no journal, no kernel loaded for kexec.

On the way to the second host boot, two things go wrong on purpose. The run is SIGKILLed between its
`kexec -l` and its `kexec -e` (L1's kexec holds the first `-e` until then: `hold_the_next_switch`):
the loaded kernel is journaled, and `host-restore` unloads it. Then L1 is reset from QEMU, as by
someone else or a watchdog, and comes back in the boot it started in: the resumed run finds the host
in another kernel than the one it asked for, says so, and switches again; nothing is measured under
the wrong label."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.integration.conftest import BOOT_TIMEOUT
from tests.integration.test_run_nested import font_list, in_l1, libvirt_in_l1, read_json_lines
from tests.rig import Rig, kernel, kernel_index, l2root, qmp
from tests.rig.failures import WEDGED, L2Lost, Wedged, lost_under_tcg, once_more
from vmharness.errors import HarnessError

pytestmark = [pytest.mark.integration, pytest.mark.vm, pytest.mark.slow]

RUNS = "/var/lib/vmharness/runs"  # kept across L1's boots (the rig's persistent folder, bound there)
RUN = f"{RUNS}/hb"
CONFIG = f"{RUNS}/hb.toml"
MPL = f"{RUNS}/mpl"
STATE = "/var/lib/vmharness/hostboots/state.json"
JOURNAL = "/run/vmharness/journal.jsonl"
HOLD, HELD = "/run/rig-hold-kexec-e", "/run/rig-kexec-e-held"  # hold_the_next_switch's two marks
L2_MIB = 384
V2_OFF, UNAFFECTED = "host-no-spectre_v2", "spec_store_bypass_disable"  # the second changes nothing in L1
SAME = f"host-no-{UNAFFECTED}"
K73, VECTORS = "k73", "mitigations=auto,no_guest_host"  # the second kernel's host boot, and its switch
SWITCH = 900.0  # seconds from a command's start to L1's next boot: an L2 booted and measured, then kexec
# How long a quick command in L1 (a poll, a start) waits for L1's agent: as long as it takes to call L1
# wedged, so that a wedged L1 goes round once more on a fresh one. A clean clone of 988ba66 lost the test
# at its first poll of the held kexec -e to a 60 s wait, with every vCPU of L1 halted and each timer one-shot.
POLL = WEDGED
# But the poll of the run's PID while L1 may be switching waits less: a question sent just before a kexec is
# answered by no agent (the new boot's knows nothing of it), and await_boot takes a poll that got no answer
# as deciding nothing. A clean clone of 0f37981 waited out the whole POLL so in one switch (420 s, against
# 69 alone) and the kexec test took 952 s.
GOING_POLL = 30.0


def config(rig: Rig, other: kernel.Kernel) -> str:
    # no tuning on either side: each knob costs L1 and L2 seconds, and the host boots are what is tested
    guest = ('cmdline = "quiet cryptomgr.notests rodata=off mitigations=off"\n'
             f'profile = "none"\nkernel = "{rig.kernel.boot_image}"\ninitrd = "{l2root.build(rig.kernel)}"\n')
    return (f'[guest]\nmemory = {L2_MIB}\nvcpus = 1\ninit = "minimal"\nboot_timeout = 900\naccel = "kvm"\n'
            f'[[instance]]\nname = "stock"\n{guest}'
            f'[[instance]]\nname = "{K73}"\nhost_boot = "{K73}"\n{guest}'
            # the rig's initramfs for 7.3 in L1's /boot (Rig.start's `also`); its modules' tree on L0 is
            # named as the rig names its own, added to the running command line, where the last one counts
            f'[[host_boot]]\nname = "{K73}"\nkernel = "/boot/vmlinuz-{other.release}"\n'
            f'initrd = "/boot/initrd.img-{other.release}"\ncmdline = "rig_modules={other.modules} {VECTORS}"\n'
            f'[study]\nhost_switches = ["spectre_v2", "{UNAFFECTED}"]\n'
            '[[client]]\nhost = "local"\nthreads = 1\n'
            '[sweep]\nconnections = "4"\niterations = 1\nduration = 3\nwarmup = 0\nwait = 0\n'
            '[load]\npercents = []\ncapacity = 0\n'
            '[samplers]\ninterval = 5.0\n[tuning]\nprofile = "none"\n'
            '[report]\nfigures = false\n')  # as test_run_nested: drawing costs L1 minutes


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
    res = in_l1(rig, "sh", "-c", line, "sh", *argv, env={"LOG": log, "MPLCONFIGDIR": MPL}, timeout=POLL)
    assert res.ok, res.stderr
    return int(res.stdout.strip())


def switched(rig: Rig, before: str, pid: int, log: str) -> float:
    """Seconds until L1 came back in another boot; the command's output if it ended without a switch."""
    def going() -> None:
        if in_l1(rig, "test", "-d", f"/proc/{pid}", timeout=GOING_POLL).returncode != 0:
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


def failed_records(rig: Rig) -> str:
    """The run's records that failed, each in full: what a failed point said (a clean clone beside
    `stress-ng --cpu 2` lost this test to "failed points: 1" with no word of which point, or why)."""
    failed = [r for r in read_json_lines(rig, f"{RUN}/records.jsonl") if r.get("ok") is False]
    return "the records that failed:\n" + "\n".join(json.dumps(r)[:3000] for r in failed)


def no_l2_lost_to_tcg(rig: Rig) -> None:
    """After each segment that measures an L2 (stock's, k73's and spectre_v2=off's: the dropped switch
    and the way home measure none): a point whose L2 KVM stopped as only the rig's TCG makes it
    (failures.lost_under_tcg) is the rig's failure, not the run's. L1 is stopped, and the test goes once
    more on a fresh one, as after a wedge; the run booted that L2 once more already, in the same L1."""
    for r in read_json_lines(rig, f"{RUN}/records.jsonl"):
        if r.get("ok") is False and lost_under_tcg(str(r.get("error", ""))):
            rig.stop()
            raise L2Lost(f"the L2 of {r.get('instance')} ({r.get('kind')}) was lost to a KVM internal error "
                         "that TCG brings about (tests/rig/failures.TCG_LOST_L2)", str(r.get("error"))[:3000])


def proc_cmdline(rig: Rig) -> str:
    return rig.read_file("/proc/cmdline").decode().strip()


def hold_the_next_switch(rig: Rig) -> None:
    """The test's seam in L1's kexec (the rig's wrapper, tests/rig/l1-init.sh): while HOLD is there, the
    next `kexec -e` takes it away, leaves HELD, and waits instead of switching, for the test to kill the
    run. `kexec -l` and `-u` are the real ones. L1's next boot writes the plain wrapper again."""
    script = (f'#!/bin/sh\nif [ "$1" = -e ] && rm "{HOLD}" 2>/dev/null; then\n'
              f'    : > "{HELD}"; exec sleep 3600\nfi\nexec /usr/sbin/kexec.rig "$@"\n')
    assert in_l1(rig, "mv", "/usr/sbin/kexec", "/usr/sbin/kexec.rig").ok
    rig.put_file("/usr/sbin/kexec", script.encode(), mode=0o755)
    rig.put_file(HOLD, b"")


def killed_at_the_switch(rig: Rig, pid: int, log: str) -> None:
    """Wait until the run's `kexec -e` is held, then SIGKILL the run's session: its kernel is loaded
    and journaled; host-restore unloads it."""
    deadline = time.monotonic() + SWITCH
    while in_l1(rig, "test", "-e", HELD, timeout=POLL).returncode != 0:
        assert in_l1(rig, "test", "-d", f"/proc/{pid}", timeout=POLL).returncode == 0, \
            f"the run ended before its kexec -e:\n{said_so_far(rig, log)}"
        assert time.monotonic() < deadline, f"no kexec -e within {SWITCH:g} s:\n{said_so_far(rig, log)}"
        time.sleep(3.0)
    assert rig.read_file("/sys/kernel/kexec_loaded").decode().strip() == "1"
    assert '"op": "kexec"' in rig.read_file(JOURNAL).decode()
    assert in_l1(rig, "kill", "-KILL", "--", f"-{pid}").ok  # `started` made it a session's leader
    restored = in_l1(rig, str(rig.repo / ".venv/bin/vmharness"), "host-restore", timeout=300)
    assert restored.ok, restored.stderr
    assert rig.read_file("/sys/kernel/kexec_loaded").decode().strip() == "0", restored.stdout
    assert in_l1(rig, "test", "-e", JOURNAL).returncode == 1, restored.stdout
    print(f"killed between kexec -l and kexec -e; host-restore said:\n{restored.stdout.strip()}")


def reset_by_someone_else(rig: Rig) -> str:
    """Reset L1 from QEMU: it comes back in the boot it started in (QEMU's kernel and command line). Its
    new boot id."""
    before = rig.boot_id()
    qmp.reset(rig.files.qmp, timeout=30)
    rig.await_boot(before, BOOT_TIMEOUT)
    qmp.reboot_ends_qemu(rig.files.qmp, timeout=30)
    return rig.boot_id()


def test_a_host_study_goes_round_l1s_host_boots_through_a_kill_and_a_reset_and_comes_home(l1_that_reboots: Rig) -> None:
    """Once more on a fresh L1 only where L1 wedged (tests/rig/failures.Wedged: the rig under TCG, not the run),
    which is printed with L1's console; a second wedge, or any other failure, is the test's."""
    other = kernel_index.obtain()  # l1_that_reboots has it in L1's /boot
    try:
        go_round(l1_that_reboots, other)
    except Wedged as exc:
        once_more(exc)  # the wedged L1 is stopped already
        with Rig.start(timeout=BOOT_TIMEOUT, host_boots=True, also=(other,)) as fresh:
            go_round(fresh, other)


def go_round(rig: Rig, other: kernel.Kernel) -> None:
    began = time.monotonic()

    def at(what: str) -> None:  # the test's timeline, for where its minutes go (docs/testing.md)
        print(f"[{time.monotonic() - began:4.0f} s] {what}")
    set_up(rig)
    font_list(rig, MPL)
    at("set up")
    rig.put_file(CONFIG, config(rig, other).encode())
    first_boot, first_line = rig.boot_id(), proc_cmdline(rig)
    hold_the_next_switch(rig)
    pid = started(rig, vmharness(rig, "run", CONFIG, "--allow-host-reboot", "--out", RUN), f"{RUNS}/1.log")
    killed_at_the_switch(rig, pid, f"{RUNS}/1.log")
    at("stock measured, the run killed at its kexec -e, host-restore done")
    reset_boot = reset_by_someone_else(rig)
    at("L1 reset and booted again")
    assert proc_cmdline(rig) == first_line  # the boot it started in: not the one the run's state asks for
    set_up(rig)
    pid = started(rig, vmharness(rig, "run", "--resume", RUN), f"{RUNS}/1b.log")
    to_k73 = switched(rig, reset_boot, pid, f"{RUNS}/1b.log")
    no_l2_lost_to_tcg(rig)
    k73_boot, k73_line = rig.boot_id(), proc_cmdline(rig)
    assert rig.read_file("/proc/sys/kernel/osrelease").decode().strip() == other.release
    assert k73_line == f"{first_line} rig_modules={other.modules} {VECTORS}", k73_line
    at(f"L1 came back in {K73} ({other.release}) {to_k73:.0f} s after the run resumed")

    set_up(rig)  # kvm_amd from 7.3's modules
    pid = started(rig, vmharness(rig, "run", "--resume", RUN), f"{RUNS}/1c.log")
    to_v2_off = switched(rig, k73_boot, pid, f"{RUNS}/1c.log")
    no_l2_lost_to_tcg(rig)
    second_boot, second_line = rig.boot_id(), proc_cmdline(rig)
    assert second_line == f"{first_line} spectre_v2=off", second_line
    assert rig.read_file("/proc/sys/kernel/osrelease").decode().strip() == rig.kernel.release
    spectre_v2 = rig.read_file("/sys/devices/system/cpu/vulnerabilities/spectre_v2").decode().strip()
    at(f"L1 came back in {V2_OFF} {to_v2_off:.0f} s after the resumed run started: spectre_v2: {spectre_v2}")

    set_up(rig)
    pid = started(rig, vmharness(rig, "run", "--resume", RUN), f"{RUNS}/2.log")
    to_same = switched(rig, second_boot, pid, f"{RUNS}/2.log")
    no_l2_lost_to_tcg(rig)
    third_boot, third_line = rig.boot_id(), proc_cmdline(rig)
    assert third_line == f"{first_line} {UNAFFECTED}=off", third_line
    at(f"L1 came back in {SAME} {to_same:.0f} s after the resumed run started")

    set_up(rig)
    pid = started(rig, vmharness(rig, "run", "--resume", RUN), f"{RUNS}/3.log")
    home = switched(rig, third_boot, pid, f"{RUNS}/3.log")
    assert proc_cmdline(rig) == first_line
    at(f"L1 came home {home:.0f} s after the resumed run started")

    set_up(rig)
    last = in_l1(rig, *vmharness(rig, "run", "--resume", RUN), timeout=1200, env={"MPLCONFIGDIR": MPL})
    log = rig.read_file(f"{RUN}/hostboots.log").decode(errors="replace")
    print(log[-4000:], last.stdout[-2000:], last.stderr[-2000:], sep="\n")
    assert last.returncode == 0, f"{last.stderr[-3000:]}\n{failed_records(rig)}"
    # the reset's boot, said and switched away from, never measured (the visits below)
    assert (f"round 1: {K73}: the host is not in the host boot asked for: the host runs the kernel "
            f"{rig.kernel.release!r}, not {other.release!r}") in log, log
    assert f"round 1: {SAME}: {SAME} dropped before it is measured: the host reports the same" in log, log
    at("the run ended at home with its report: four host boots and home")

    manifest: dict[str, Any] = json.loads(rig.read_file(f"{RUN}/manifest.json"))
    assert manifest["host_boots_done"] is True
    visits = [(b["boot"], b["instances"], b["cmdline"], b["dropped"]) for b in manifest["host_boots"]]
    assert visits == [("", ["stock"], first_line, False), (K73, [K73], k73_line, False),
                      (V2_OFF, [V2_OFF], second_line, False), (SAME, [SAME], third_line, True)], visits
    # each host boot's facts, as the arrival check read them: four boots, and what each said of spectre_v2
    (start, k73, v2_off, same) = manifest["host_boots"]
    boots = (first_boot, k73_boot, second_boot, third_boot)
    assert [b["boot_id"].strip() for b in (start, k73, v2_off, same)] == list(boots)
    assert reset_boot not in boots
    assert [b["release"] for b in (start, k73, v2_off, same)] == [rig.kernel.release, other.release,
                                                                  rig.kernel.release, rig.kernel.release]
    # 7.3 names the attack vectors it mitigates, without guest_host under its switch; 6.1 prints no such line.
    # The control, 7.3 booted without the switch naming guest_host too: test_second_host_kernel.py
    vectors = kernel.attack_vectors(k73["mitigation_log"])
    assert "guest_host" not in vectors and {"user_kernel", "guest_guest"} <= vectors, k73["mitigation_log"]
    assert kernel.attack_vectors(start["mitigation_log"]) == set(), start["mitigation_log"]
    assert v2_off["vulnerabilities"]["spectre_v2"].strip() == spectre_v2
    assert same["vulnerabilities"] == start["vulnerabilities"] and same["mitigation_log"] == start["mitigation_log"]
    assert any("Spectre V2 : Mitigation" in line for line in start["mitigation_log"]), start["mitigation_log"]
    print(f"spectre_v2 in L1: {start['vulnerabilities']['spectre_v2']!r}, with spectre_v2=off {spectre_v2!r}")
    records = read_json_lines(rig, f"{RUN}/records.jsonl")
    points = [r for r in records if r["kind"] == "measurement"]
    assert sorted(r["instance"] for r in points) == [V2_OFF, K73, "stock"]
    assert all(r["ok"] and r["client"]["requests"] > 0 for r in points), points
    assert [(r["instance"], r["iteration"]) for r in records if r["kind"] == "dropped"] == [(SAME, 0)]
    answer = rig.read_file(f"{RUN}/report/report.txt").decode()
    assert f"{UNAFFECTED}: left out: dropped before it was measured: its host boot reported" in answer, answer
    assert in_l1(rig, "test", "-e", STATE).returncode == 1  # the state file went with the run
    assert in_l1(rig, "test", "-e", JOURNAL).returncode == 1
    assert rig.read_file("/sys/kernel/kexec_loaded").decode().strip() == "0"
    assert rig.boot_id() not in (*boots, reset_boot)
