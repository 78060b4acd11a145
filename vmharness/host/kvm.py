"""Is KVM usable? /dev/kvm existing is not enough, nor is a tiny guest reaching long mode (a PVM /dev/kvm
runs that but not a standard kernel): the probe runs the tiny guest in a child with a timeout, then
boots a Linux kernel under QEMU with KVM and requires it to get past its early setup (kvm_boot).

The JSON keeps {"usable", "detail"} (snapshots and `auto` read those) and adds what each step found:
"long_mode" (the tiny guest) and "linux" (the kernel booted, the CPU model, whether it was tried).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness import proc
from vmharness.errors import HarnessError
from vmharness.host import kvm_boot

PROBE_TIMEOUT = 5.0  # the tiny guest: it finishes in milliseconds where KVM works
LINUX_TIMEOUT = 5.0  # the kernel's proof: well under a second on a working KVM; more if TCG is slow too
TCG_FACTOR = 3.0  # KVM's guest may take this many times what the same kernel needs under TCG beside it
LINUX_CAP = 150.0  # in the rig's L1 (itself under TCG, on a loaded machine) TCG needs 20-40 s
PVM_MODULE = "/sys/module/kvm_pvm"  # a PVM hypervisor: it runs only kernels built for PVM


@dataclass(frozen=True)
class KvmProbe:
    usable: bool
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"usable": self.usable, "detail": self.detail, **self.extra}


_MEASURED: dict[tuple[str, float, float], KvmProbe] = {}


def probe(dev: str = "/dev/kvm", timeout: float = PROBE_TIMEOUT, linux_timeout: float = LINUX_TIMEOUT,
          kernel: tuple[Path, str] | None = None) -> KvmProbe:
    """`kernel`: the kernel to boot and what it is ("the image X's kernel"); found if None. Measured once
    per process for a found kernel: one command asks several times (host-check's rows, a run's preflight
    for each instance, the live facts' readers), a failing probe costs its deadline each time, and the
    answer does not change while a command runs."""
    key = (dev, timeout, linux_timeout)
    if kernel is None and key in _MEASURED:
        return _MEASURED[key]
    result = _probe(dev, timeout, linux_timeout, kernel)
    if kernel is None:
        _MEASURED[key] = result
    return result


def _probe(dev: str, timeout: float, linux_timeout: float, kernel: tuple[Path, str] | None) -> KvmProbe:
    tiny = long_mode(dev, timeout)
    if not tiny.usable:
        return KvmProbe(False, tiny.detail, {"long_mode": {"ok": False, "detail": tiny.detail}})
    steps: dict[str, Any] = {"long_mode": {"ok": True, "detail": tiny.detail}}
    qemu = kvm_boot.qemu_binary()
    kernel = kernel or kvm_boot.find_kernel()
    if qemu is None or kernel is None:
        why = f"{kvm_boot.QEMU} is not installed" if qemu is None else (
            "no kernel to boot (no image is built, and /boot has no vmlinuz for the running kernel)")
        steps["linux"] = {"tried": False, "detail": why}
        pvm = "; kvm_pvm is loaded: a PVM /dev/kvm runs only kernels built for PVM" if _pvm() else ""
        return KvmProbe(True, f"{tiny.detail}; a Linux boot was not tried: {why}, so whether a standard "
                              f"kernel runs under this KVM is not proven{pvm}", steps)
    return _linux(qemu, kernel, linux_timeout, steps)


def _linux(qemu: str, kernel: tuple[Path, str], floor: float, steps: dict[str, Any]) -> KvmProbe:
    path, what = kernel
    first = kvm_boot.race(path, kvm_boot.CPU_HOST, floor, TCG_FACTOR, LINUX_CAP, qemu)
    steps["linux"] = _step(first, tried=True, kernel=str(path), cpu=kvm_boot.CPU_HOST)
    if first.kvm.ok:
        return KvmProbe(True, f"{what} ({path}) booted under KVM with -cpu host: {first.kvm.detail}", steps)
    said = f"KVM's guest ({what}, {path}, -cpu host as the harness's guests get): {first.kvm.detail}"
    if not first.kvm.exited:
        return KvmProbe(False, f"{said}{_yardstick(first)}: this /dev/kvm cannot run a standard kernel"
                               f"{_pvm_hint()}", steps)
    # QEMU refused -cpu host: does a kernel run at all with QEMU's default CPU model? That tells the
    # researcher which of the two to fix.
    second = kvm_boot.race(path, None, floor, TCG_FACTOR, LINUX_CAP, qemu)
    steps["linux_default_cpu"] = _step(second)
    if second.kvm.ok:
        return KvmProbe(False, f"{said}; with QEMU's default CPU model, {second.kvm.detail}: KVM runs a "
                               "kernel, but not with the host's CPU model", steps)
    if second.kvm.exited:
        return KvmProbe(False, f"{said}; with QEMU's default CPU model, {second.kvm.detail} too: QEMU cannot "
                               "start a KVM guest here", steps)
    return KvmProbe(False, f"{said}; with QEMU's default CPU model, {second.kvm.detail}{_yardstick(second)}: "
                           f"this /dev/kvm cannot run a standard kernel{_pvm_hint()}", steps)


def _step(race: kvm_boot.Race, **fields: object) -> dict[str, Any]:
    tcg = race.tcg
    return {**fields, "ok": race.kvm.ok, "seconds": race.kvm.seconds, "detail": race.kvm.detail,
            "deadline": round(race.deadline, 1), "tcg": None if tcg is None else
            {"ok": tcg.ok, "seconds": tcg.seconds, "detail": tcg.detail}}


def _yardstick(race: kvm_boot.Race) -> str:
    """What the same kernel did under TCG meanwhile: proof that the kernel and the machine are fine."""
    if race.tcg is None:
        return ""
    return f", while under TCG {race.tcg.detail}"


def _pvm() -> bool:
    return Path(PVM_MODULE).exists()


def _pvm_hint() -> str:
    return " (kvm_pvm is loaded: a PVM hypervisor, which runs only kernels built for PVM)" if _pvm() else ""


def long_mode(dev: str = "/dev/kvm", timeout: float = PROBE_TIMEOUT) -> KvmProbe:
    """The tiny guest (kvm_probe) in a child process: a broken KVM can hang in KVM_RUN."""
    try:
        res = proc.run(
            [sys.executable, "-m", "vmharness.host.kvm_probe", dev], timeout=timeout, check=False
        )
    except HarnessError:
        return KvmProbe(
            False,
            f"the probe guest did not finish within {timeout:g} s: /dev/kvm exists but guests hang",
        )
    try:
        data = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return KvmProbe(False, f"the probe crashed (exit {res.returncode}): {res.stderr.strip()[-200:]}")
    if res.ok:
        return KvmProbe(True, f"a guest entered long mode and ran (KVM API {data.get('api_version')})")
    return KvmProbe(False, str(data.get("error", "unknown failure")))
