"""Is KVM usable? /dev/kvm existing is not enough, nor is a tiny guest reaching long mode (a PVM /dev/kvm
runs that but not a standard kernel): the probe runs the tiny guest in a child with a timeout, then
boots a Linux kernel under QEMU with KVM and requires it to get past its early setup (kvm_boot).

The JSON keeps {"usable", "detail"} (snapshots and `auto` read those) and adds what each step found:
"long_mode" (the tiny guest) and "linux" (the kernel booted, the CPU model, whether it was tried).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.host.inspect import kvm_boot, kvm_memo, kvm_probe
from vmharness.system import proc

PROBE_TIMEOUT = 5.0  # the tiny guest: it finishes in milliseconds where KVM works
PROBE_OUTPUT_MAX = 65536  # bytes kept of each of the child's streams (it prints one short JSON line)
STARTUP_TIMEOUT = 60.0  # the child's Python start: 0.1 s here, seconds in the rig's L1 (files over 9p)
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
    answer does not change while a command runs; and kept for later commands while nothing it depends
    on changes (kvm_memo.py)."""
    key = (dev, timeout, linux_timeout)
    if kernel is not None:
        return _probe(dev, timeout, linux_timeout, kernel)
    if key in _MEASURED:
        return _MEASURED[key]
    found = kvm_boot.find_kernel()
    now = kvm_memo.key(dev, kvm_boot.qemu_binary(), found[0] if found else None, (timeout, linux_timeout))
    kept = kvm_memo.recall(now)  # measured earlier in this boot of the host, on all the same
    if kept is not None:
        _MEASURED[key] = KvmProbe(kept["usable"], kept["detail"],
                                  {k: v for k, v in kept.items() if k not in ("usable", "detail")})
        return _MEASURED[key]
    result = _probe(dev, timeout, linux_timeout, found)
    if result.extra.get("linux", {}).get("tried", True):  # an image built later is tried
        _MEASURED[key] = result
        # kept for later commands: a kernel that booted under KVM, or a PVM /dev/kvm, which runs no
        # standard kernel; a "no" on any other KVM may be a deadline missed on a loaded machine
        if result.usable or _pvm():
            kvm_memo.keep(now, result.to_json())
    return result


def _probe(dev: str, timeout: float, linux_timeout: float, kernel: tuple[Path, str] | None) -> KvmProbe:
    """`kernel`: the one to boot (None: none was found)."""
    tiny = long_mode(dev, timeout)
    if not tiny.usable:
        return KvmProbe(False, tiny.detail, {"long_mode": {"ok": False, "detail": tiny.detail}})
    steps: dict[str, Any] = {"long_mode": {"ok": True, "detail": tiny.detail}}
    qemu = kvm_boot.qemu_binary()
    if qemu is None or kernel is None:
        why = f"{kvm_boot.QEMU} is not installed" if qemu is None else (
            "no kernel to boot (no image is built, and /boot has no vmlinuz for the running kernel)")
        steps["linux"] = {"tried": False, "detail": why}
        if _pvm():  # known not to run a standard kernel: no need to boot one to say so
            return KvmProbe(False, f"{tiny.detail}, but kvm_pvm is loaded: a PVM /dev/kvm runs only kernels "
                                   f"built for PVM (a Linux boot was not tried: {why})", steps)
        return KvmProbe(True, f"{tiny.detail}; a Linux boot was not tried: {why}, so whether a standard "
                              "kernel runs under this KVM is not proven", steps)
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


def long_mode(dev: str = "/dev/kvm", timeout: float = PROBE_TIMEOUT, startup: float = STARTUP_TIMEOUT) -> KvmProbe:
    """The tiny guest (kvm_probe) in a child process: a broken KVM can hang in KVM_RUN, and only a child
    can be given up on. `timeout` counts from the child's word that its vCPU is about to run; before
    that, the child has `startup` s to start Python and set the VM up."""
    try:
        child = proc.spawn([sys.executable, "-m", "vmharness.host.inspect.kvm_probe", dev], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, die_with_parent=True)
    except HarnessError as exc:
        return KvmProbe(False, f"the probe could not start: {exc.message}")
    try:
        out, err, state = _read_probe(child, timeout, startup)
    finally:
        code = _stop(child)
    if isinstance(code, HarnessError):  # a child that outlives SIGKILL: its vCPU holds it in the kernel
        return KvmProbe(False, f"the probe could not be stopped: {code.message}")
    if state == "hung":
        return KvmProbe(False, f"the probe guest did not finish within {timeout:g} s: /dev/kvm exists but guests hang")
    if state == "slow":
        return KvmProbe(False, f"the probe did not get to run its guest within {startup:g} s")
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return KvmProbe(False, f"the probe crashed (exit {code}): {err.strip()[-200:]}")
    if code == 0:
        return KvmProbe(True, f"a guest entered long mode and ran (KVM API {data.get('api_version')})")
    return KvmProbe(False, str(data.get("error", "unknown failure")))


def _stop(child: subprocess.Popen[bytes]) -> int | HarnessError:
    """The child's exit status, or the error of one that would not end (returned, not raised: raised
    in a `finally`, it would hide what ended the probe)."""
    try:
        return proc.stop(child, grace=2.0)
    except HarnessError as exc:
        return exc


def _read_probe(child: subprocess.Popen[bytes], timeout: float, startup: float) -> tuple[str, str, str]:
    """The child's stdout and stderr, and how it went: "ended" (it closed its output), "hung" (its guest
    ran past `timeout`), "slow" (it did not get to run its guest within `startup`)."""
    assert child.stdout is not None and child.stderr is not None
    out, err = bytearray(), bytearray()
    bufs = {child.stdout.fileno(): out, child.stderr.fileno(): err}
    ready = kvm_probe.READY.encode() + b"\n"
    deadline, started = time.monotonic() + startup, False
    while bufs:
        if not started and ready in out:
            started, deadline = True, time.monotonic() + timeout
        left = deadline - time.monotonic()
        if left <= 0:
            return out.decode(errors="replace"), err.decode(errors="replace"), "hung" if started else "slow"
        for fd in select.select(list(bufs), [], [], min(left, 0.2))[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                del bufs[fd]
                continue
            buf = (out if fd == child.stdout.fileno() else err)
            buf += chunk[: max(PROBE_OUTPUT_MAX - len(buf), 0)]
    return out.decode(errors="replace"), err.decode(errors="replace"), "ended"
