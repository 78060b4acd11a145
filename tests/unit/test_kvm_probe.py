"""The KVM probe's decisions: what a Linux boot's console proves (recorded consoles: a working KVM, this
development machine's PVM /dev/kvm, QEMU refusing its arguments), what the probe concludes from its two
steps, and how the tiny guest's child is read (the kernel booted and the race: test_kvm_boot.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmharness.errors import HarnessError
from vmharness.host.inspect import kvm, kvm_boot
from vmharness.host.inspect.kvm_boot import Boot
from vmharness.system import proc

# The first lines of the image's kernel (Debian 6.1) on its serial console, booted without root.
BOOTED = """\
[    0.000000] Linux version 6.1.0-50-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0)
[    0.000000] Command line: console=ttyS0 ignore_loglevel panic=-1
[    0.000000] x86/fpu: x87 FPU will use FXSAVE
[    0.010000] tsc: Detected 2445.406 MHz processor
[    0.120000] Calibrating delay loop (skipped), value calculated using timer frequency.. 4890.81 BogoMIPS
"""
# QEMU 7.2 with -cpu host on this machine's PVM /dev/kvm: it cannot set IA32_ARCH_CAPABILITIES.
MSR_REFUSED = (
    "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n"
    "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: "
    "Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed.\n"
)
# QEMU's default model on the PVM /dev/kvm: a bzImage's 16-bit setup code runs (with earlyprintk), then nothing.
SETUP_ONLY = "Probing EDD (edd=off to disable)... ok\n"


def test_banner_then_a_line_after_early_setup_is_proof() -> None:
    boot = kvm_boot.judge(BOOTED, "", None, 0.4, "5 s")
    assert boot.ok and boot.seconds == 0.4
    assert boot.detail == "the kernel printed its banner and then 'Calibrating delay loop'"  # no time: see judge


def test_qemu_exiting_at_the_panic_after_the_proof_is_still_proof() -> None:
    console = BOOTED + "[    1.2] VFS: Cannot open root device\n[    1.3] Kernel panic - not syncing: VFS\n"
    assert kvm_boot.judge(console, "", 0, 1.4, "5 s").ok


def test_banner_alone_is_not_enough() -> None:
    boot = kvm_boot.judge(BOOTED.splitlines()[0] + "\n", "", None, 5.0, "5 s")
    assert not boot.ok and not boot.exited
    assert "printed its banner but nothing after early setup within 5 s" in boot.detail


def test_a_progress_line_before_the_banner_does_not_count() -> None:
    assert not kvm_boot.judge("Run /init as init process\n" + BOOTED.splitlines()[0], "", None, 5, "5 s").ok


def test_nothing_on_the_console_within_the_timeout() -> None:
    boot = kvm_boot.judge("", "", None, 5.0, "5 s")
    assert not boot.ok and not boot.exited
    assert boot.detail == "the kernel did not print its banner within 5 s (nothing on its console)"


def test_setup_code_output_only_is_named() -> None:
    boot = kvm_boot.judge(SETUP_ONLY, "", None, 5.0, "5 s")
    assert not boot.ok and "its console ended with: Probing EDD" in boot.detail


def test_the_last_console_line_is_named_without_its_timestamp() -> None:
    boot = kvm_boot.judge(BOOTED.splitlines()[0] + "\n[    0.004000] x86/fpu: x87 FPU will use FXSAVE\n", "",
                          None, 5.0, "5 s")
    assert boot.detail.endswith("(its console ended with: x86/fpu: x87 FPU will use FXSAVE)")


def test_qemu_failing_names_its_error_not_the_assertion_after_it() -> None:
    boot = kvm_boot.judge("", MSR_REFUSED, -6, 0.05, "5 s")
    assert not boot.ok and boot.exited
    assert "QEMU exited with status -6 before the kernel printed its banner" in boot.detail
    assert "failed to set MSR 0x10a" in boot.detail and "Assertion" not in boot.detail


def test_guest_dying_after_its_banner_shows_the_last_console_line() -> None:
    boot = kvm_boot.judge(BOOTED.splitlines()[0] + "\nKVM internal error. Suberror: 1\n", "", 1, 0.3, "5 s")
    assert boot.exited and "after its banner" in boot.detail


@given(st.text())
def test_no_console_without_the_banner_is_ever_proof(console: str) -> None:
    assert not kvm_boot.judge(console.replace(kvm_boot.BANNER, ""), "", None, 1.0, "5 s").ok


# The probe's two steps, with the tiny guest and the boots replaced by their recorded outcomes.

TINY_OK = kvm.KvmProbe(True, "a guest entered long mode and ran (KVM API 12)")
KERNEL = (Path("/images/abc/vmlinux"), "the image abc's kernel")
HANG = Boot(False, "the kernel did not print its banner within 5 s (nothing on its console)")
REFUSED = Boot(False, "QEMU exited with status -6 before the kernel printed its banner: error: MSR", exited=True)
RAN = Boot(True, "the kernel printed its banner and then 'Calibrating delay loop'", seconds=0.4)
TCG_RAN = Boot(True, "the kernel printed its banner and then 'Calibrating delay loop'", seconds=1.2)


@pytest.fixture()
def steps(monkeypatch: pytest.MonkeyPatch) -> dict[str | None, Boot]:
    """KVM's boot outcome by CPU model ("host", None for QEMU's default; TCG's beside it ran when KVM's
    hung); no kvm_pvm unless a test says so."""
    outcomes: dict[str | None, Boot] = {}

    def race(path: Path, cpu: str | None, floor: float, factor: float, cap: float, qemu: str) -> kvm_boot.Race:
        got = outcomes[cpu]
        return kvm_boot.Race(got, None if got.ok or got.exited else TCG_RAN, floor)

    monkeypatch.setattr(kvm, "long_mode", lambda dev, timeout: TINY_OK)
    monkeypatch.setattr(kvm_boot, "qemu_binary", lambda: "/usr/bin/qemu-system-x86_64")
    monkeypatch.setattr(kvm_boot, "race", race)
    monkeypatch.setattr(kvm, "PVM_MODULE", "/nonexistent/kvm_pvm")
    monkeypatch.setattr(kvm, "_MEASURED", {})
    return outcomes


def _probe() -> dict[str, object]:
    result = kvm.probe(kernel=KERNEL).to_json()
    json.dumps(result)  # what snapshots store
    assert isinstance(result["usable"], bool) and isinstance(result["detail"], str)
    return result


def test_a_kernel_that_boots_with_the_host_cpu_makes_kvm_usable(steps: dict[str | None, Boot]) -> None:
    steps["host"] = RAN
    result = _probe()
    assert result["usable"] is True
    assert "the image abc's kernel (/images/abc/vmlinux) booted under KVM with -cpu host" in str(result["detail"])
    assert result["linux"] == {"tried": True, "kernel": "/images/abc/vmlinux", "cpu": "host", "ok": True,
                               "seconds": 0.4, "detail": RAN.detail, "deadline": 5.0, "tcg": None}


def test_a_kernel_that_hangs_makes_kvm_unusable_and_says_why(steps: dict[str | None, Boot],
                                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    steps["host"] = HANG
    monkeypatch.setattr(kvm, "PVM_MODULE", str(tmp_path))
    result = _probe()
    assert result["usable"] is False
    assert "did not print its banner within 5 s" in str(result["detail"])
    assert "while under TCG the kernel printed its banner and then 'Calibrating delay loop':" in str(
        result["detail"])
    assert "this /dev/kvm cannot run a standard kernel (kvm_pvm is loaded" in str(result["detail"])
    assert "linux_default_cpu" not in result
    assert result["linux"]["tcg"] == {"ok": True, "seconds": 1.2, "detail": TCG_RAN.detail}  # type: ignore[index]


def test_qemu_refusing_the_host_cpu_tries_its_default_model(steps: dict[str | None, Boot]) -> None:
    steps["host"], steps[None] = REFUSED, HANG
    result = _probe()
    assert result["usable"] is False
    detail = str(result["detail"])
    assert "error: MSR" in detail and "with QEMU's default CPU model, the kernel did not print" in detail
    assert "cannot run a standard kernel" in detail and "kvm_pvm" not in detail


def test_a_kernel_that_runs_only_with_the_default_model_is_not_enough(steps: dict[str | None, Boot]) -> None:
    steps["host"], steps[None] = REFUSED, RAN
    result = _probe()
    assert result["usable"] is False and "but not with the host's CPU model" in str(result["detail"])


def test_qemu_that_starts_no_kvm_guest_at_all(steps: dict[str | None, Boot]) -> None:
    steps["host"] = steps[None] = REFUSED
    assert "QEMU cannot start a KVM guest here" in str(_probe()["detail"])


def test_the_tiny_guest_failing_ends_the_probe(steps: dict[str | None, Boot], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvm, "long_mode", lambda dev, timeout: kvm.KvmProbe(False, "the guest triple-faulted"))
    result = _probe()
    assert result["usable"] is False and result["detail"] == "the guest triple-faulted"
    assert "linux" not in result


def test_without_a_kernel_the_result_says_no_linux_boot_was_tried(steps: dict[str | None, Boot],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvm_boot, "find_kernel", lambda: None)
    result = kvm.probe().to_json()
    assert result["usable"] is True
    assert "a Linux boot was not tried: no kernel to boot" in str(result["detail"])
    assert "is not proven" in str(result["detail"])
    assert result["linux"] == {"tried": False, "detail": "no kernel to boot (no image is built, and /boot has no "
                                                         "vmlinuz for the running kernel)"}


def test_without_a_kernel_a_pvm_kvm_is_not_usable_and_nothing_is_kept(steps: dict[str | None, Boot],
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    kernels: list[tuple[Path, str] | None] = [None, KERNEL]
    monkeypatch.setattr(kvm_boot, "find_kernel", lambda: kernels.pop(0))
    monkeypatch.setattr(kvm, "PVM_MODULE", str(tmp_path))
    first = kvm.probe()
    assert first.usable is False and "kvm_pvm is loaded" in first.detail and "not tried" in first.detail
    steps["host"] = HANG
    second = kvm.probe()  # an image built since: booted now, not the earlier answer
    assert second.extra["linux"]["tried"] is True and "cannot run a standard kernel" in second.detail


def test_a_found_kernels_verdict_is_measured_once_per_process(steps: dict[str | None, Boot],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    found: list[int] = []

    def find_kernel() -> tuple[Path, str]:
        found.append(1)
        return KERNEL

    monkeypatch.setattr(kvm_boot, "find_kernel", find_kernel)
    steps["host"] = RAN
    assert kvm.probe().usable and kvm.probe().usable
    steps["host"] = HANG
    assert not kvm.probe(linux_timeout=1.0).usable  # other settings: measured anew
    assert len(found) == 2
    assert kvm.probe(kernel=KERNEL).usable is False  # a kernel named by the caller: always measured


# The tiny guest's child, read by the parent: its guest is timed from its word that it runs.

def _child(script: str) -> subprocess.Popen[bytes]:
    return proc.spawn([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize(("script", "timeout", "startup", "state"), [
    # Asleep longer than its timeout before it runs, then done at once: the timeout leaves a loaded
    # machine 0.8 s between the two lines, and still counts only from 'running'. A child that is to
    # say 'running' has 30 s to start (it needs only a Python's start, however slow): only the one
    # that never says it is given a short startup.
    ("import time; time.sleep(1.0); print('running', flush=True); print('{}')", 0.8, 30.0, "ended"),
    ("print('running', flush=True); import time; time.sleep(30)", 0.3, 30.0, "hung"),
    ("import time; time.sleep(30)", 5.0, 0.3, "slow"),
    ("import sys; print('{}'); sys.exit(1)", 5.0, 30.0, "ended"),
])
def test_the_tiny_guests_clock_starts_when_its_vcpu_runs(script: str, timeout: float, startup: float,
                                                         state: str) -> None:
    child = _child(script)
    try:
        assert kvm._read_probe(child, timeout, startup)[2] == state
    finally:
        proc.stop(child, grace=1.0)


@pytest.mark.parametrize(("dev", "says"), [("/dev/null", "Inappropriate ioctl"), ("/nonexistent/kvm", "No such file")])
def test_a_device_that_is_not_kvm_is_named_by_the_childs_error(dev: str, says: str) -> None:
    result = kvm.long_mode(dev)
    assert not result.usable and says in result.detail


def test_a_probe_that_cannot_be_stopped_is_an_unusable_kvm_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def stuck(p: subprocess.Popen[bytes], *, grace: float = 5.0, group: bool = False) -> int:
        p.kill()
        p.wait()
        raise HarnessError(f"process {p.pid} (python3) did not end within 60 s of SIGKILL: it is stuck in the kernel")

    monkeypatch.setattr(proc, "stop", stuck)
    result = kvm.long_mode("/dev/null")
    assert not result.usable
    assert result.detail.startswith("the probe could not be stopped: process ") and "of SIGKILL" in result.detail
