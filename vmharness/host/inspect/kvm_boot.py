"""Can this /dev/kvm run a standard Linux kernel? Boot one under QEMU with KVM and watch its console.

The tiny probe guest (kvm_probe) proves only that a vCPU can reach long mode: a PVM /dev/kvm (a KVM
that runs only kernels built for PVM) passes it, yet a standard kernel never gets past its setup code
there. What the harness needs is a kernel that boots, so this boots one: no disk, no initramfs, its
console on QEMU's stdout, and waits for the kernel's banner followed by a line printed only after long
mode, early setup and working interrupts ("Calibrating delay loop" comes after interrupts are enabled).
QEMU is stopped as soon as it is seen; a working KVM shows it in well under a second.

The kernel booted is the newest built image's (what the harness's guests run), else the running host's
/boot/vmlinuz-$(uname -r), read in place; with neither, no Linux boot is tried and the result says so.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.system import imagedir, proc

QEMU = "qemu-system-x86_64"
BANNER = "Linux version "
# Each printed after the banner, long mode and the kernel's early setup; any one of them is enough.
PROGRESS = ("Calibrating delay loop", "clocksource: Switched to", "Freeing unused kernel", "Run /init",
            "VFS: ", "Kernel panic")
APPEND = "console=ttyS0 ignore_loglevel panic=-1"
_STAMP = re.compile(r"^\s*\[\s*[0-9]+\.[0-9]+\]\s*")  # the kernel's "[    0.123456] " before a line
KERNEL_MAX_BYTES = 512 << 20  # a vmlinux with debug info stays well below
CONSOLE_MAX_BYTES = 1 << 20  # more than a whole boot log; what comes after is not read
BOOT = "/boot"
TCG = "tcg,tb-size=64"  # MiB of translated code (QEMU's default is 1 GiB): the yardstick stays light
CPU_HOST = "host"  # what the harness's guests get under KVM (libvirt's host-passthrough)


@dataclass(frozen=True)
class Boot:
    ok: bool
    detail: str
    exited: bool = False  # QEMU ended before the proof (it refused its arguments, or the guest died)
    seconds: float | None = None  # when the proof was seen


def judge(console: str, errors: str, returncode: int | None, elapsed: float, limit: str) -> Boot:
    """What a boot's console says. `returncode` is None when QEMU was still running when it was read;
    `limit` says how long it was given ("5 s"). The detail holds no measured time, so that two probes
    of one host read the same (a snapshot's host-check is compared with the live one); `seconds` has it."""
    start = console.find(BANNER)
    later = next((m for m in PROGRESS if start >= 0 and console.find(m, start) > start), None)
    if start >= 0 and later is not None:
        return Boot(True, f"the kernel printed its banner and then {later!r}", seconds=round(elapsed, 2))
    said = _error_line(errors)
    if returncode is not None:
        what = "after its banner" if start >= 0 else "before the kernel printed its banner"
        tail = f": {said}" if said else (f"; its console ended with: {_last_line(console)}" if console else "")
        return Boot(False, f"QEMU exited with status {returncode} {what}{tail}", exited=True)
    if start >= 0:
        return Boot(False, f"the kernel printed its banner but nothing after early setup within {limit} "
                           f"(its console ended with: {_last_line(console)})")
    if console.strip():
        return Boot(False, f"the kernel did not print its banner within {limit} (its console ended "
                           f"with: {_last_line(console)})")
    return Boot(False, f"the kernel did not print its banner within {limit} (nothing on its console)")


def _error_line(text: str) -> str:
    """QEMU's first line that says "error" (an assertion that follows it says less), else its last."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "")
    return said[:200]


def _last_line(text: str) -> str:
    """The console's last line without the kernel's timestamp (it differs from boot to boot)."""
    lines = [_STAMP.sub("", line).strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def argv(qemu: str, kernel: Path, cpu: str | None, accel: str) -> list[str]:
    """No disk, no network, no initramfs: the kernel panics when it finds no root, long after the proof."""
    return [qemu, "-accel", accel, *(["-cpu", cpu] if cpu else []), "-m", "256", "-smp", "1",
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
            "-kernel", str(kernel), "-append", APPEND]


def kvm_deadline(tcg_proof: float | None, tcg_over: bool, floor: float, factor: float, cap: float) -> float:
    """How long KVM's guest is given, in seconds since both started: `floor`, or `factor` times what the
    same kernel needed under TCG if that is more (a machine that is itself emulated, or loaded, is slow
    at both); while TCG has not proven anything yet, up to `cap`; `floor` if TCG ended without proof."""
    if tcg_proof is not None:
        return min(max(floor, factor * tcg_proof), cap)
    return floor if tcg_over else cap


@dataclass
class _Qemu:
    child: subprocess.Popen[bytes]
    console: bytearray = field(default_factory=bytearray)
    errors: bytearray = field(default_factory=bytearray)
    proof: float | None = None  # seconds after the start when the console showed the proof
    code: int | None = None

    def pipes(self) -> dict[int, bytearray]:
        assert self.child.stdout is not None and self.child.stderr is not None
        return {self.child.stdout.fileno(): self.console, self.child.stderr.fileno(): self.errors}

    def text(self) -> str:
        return self.console.decode(errors="replace")


@dataclass(frozen=True)
class Race:
    kvm: Boot
    tcg: Boot | None  # None unless KVM's guest ran out of time (then: what the same kernel did under TCG)
    deadline: float


def race(kernel: Path, cpu: str | None, floor: float, factor: float, cap: float, qemu: str = QEMU) -> Race:
    """Boot `kernel` under KVM with `-cpu cpu` (QEMU's default model if None) and, beside it, under TCG
    (the yardstick for how fast this machine boots it at all); stop both once KVM's guest has proven
    itself, QEMU under KVM has exited, or KVM's deadline (kvm_deadline) has passed."""
    began = time.monotonic()
    try:
        kvm = _Qemu(_spawn(argv(qemu, kernel, cpu, "kvm")))
    except HarnessError as exc:
        return Race(Boot(False, exc.message, exited=True), None, floor)
    tcg: _Qemu | None = None
    try:
        tcg = _Qemu(_spawn(argv(qemu, kernel, "max", TCG)))
        deadline = _watch(kvm, tcg, began, floor, factor, cap)
    finally:
        for q in (kvm, tcg):
            if q is not None:
                proc.stop(q.child, grace=2.0)
    elapsed = time.monotonic() - began
    given = f"{deadline:g} s" if deadline in (floor, cap) else f"{factor:g} times the time it took under TCG"
    kvm_boot = judge(kvm.text(), kvm.errors.decode(errors="replace"), kvm.code, kvm.proof or elapsed, given)
    tcg_boot = None  # TCG's guest is the yardstick only when KVM's ran out of time
    if not kvm_boot.ok and not kvm_boot.exited:
        tcg_boot = judge(tcg.text(), tcg.errors.decode(errors="replace"), tcg.code, tcg.proof or elapsed,
                         "the time KVM's guest was given")
    return Race(kvm_boot, tcg_boot, deadline)


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return proc.spawn(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, die_with_parent=True)


def _watch(kvm: _Qemu, tcg: _Qemu, began: float, floor: float, factor: float, cap: float) -> float:
    """Read both QEMUs' consoles until KVM's guest proves itself or QEMU under KVM exits (returned at
    once) or KVM's deadline passes; the deadline in force at the end."""
    pipes = {**kvm.pipes(), **tcg.pipes()}
    while True:
        now = time.monotonic() - began
        for q in (kvm, tcg):
            if q.code is None:
                q.code = q.child.poll()
            if q.proof is None and judge(q.text(), "", None, 0.0, "").ok:
                q.proof = now
        deadline = kvm_deadline(tcg.proof, tcg.code is not None and tcg.proof is None, floor, factor, cap)
        if kvm.proof is not None or now >= deadline:
            return deadline
        if kvm.code is not None:
            _drain(kvm)
            return deadline
        _read(pipes, min(deadline - now, 0.2))


def _read(pipes: dict[int, bytearray], wait: float) -> None:
    ready, _, _ = select.select(list(pipes), [], [], max(wait, 0.0))
    for fd in ready:
        chunk = os.read(fd, 65536)
        if not chunk:
            del pipes[fd]
            continue
        buf = pipes[fd]
        buf += chunk[: max(CONSOLE_MAX_BYTES - len(buf), 0)]


def _drain(q: _Qemu, wait: float = 1.0) -> None:
    """What an exited QEMU left in its pipes (its error message), for at most `wait` s."""
    pipes, until = q.pipes(), time.monotonic() + wait
    while pipes and time.monotonic() < until:
        _read(pipes, 0.1)


def qemu_binary() -> str | None:
    return shutil.which(QEMU)


def find_kernel() -> tuple[Path, str] | None:
    """The kernel to boot and where it came from: the newest built image's boot kernel, else the running
    host's /boot/vmlinuz-$(uname -r); None if neither is a regular file of a sane size."""
    folder = imagedir.path()
    found: list[tuple[float, Path]] = []
    try:
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        entries = []
    for entry in entries:
        for name in ("vmlinux", "vmlinuz"):  # vmlinux first: what the image's guests boot (PVH)
            mtime = _usable(entry / name)
            if mtime is not None and (entry / "image.json").is_file():
                found.append((mtime, entry / name))
                break
    if found:
        newest = max(found)[1]
        return newest, f"the image {newest.parent.name}'s kernel"
    host_kernel = Path(BOOT) / f"vmlinuz-{os.uname().release}"
    if _usable(host_kernel) is not None:
        return host_kernel, "the running host's kernel"
    return None


def _usable(path: Path) -> float | None:
    """The file's mtime if it is a regular file (not a link) of at most KERNEL_MAX_BYTES."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > KERNEL_MAX_BYTES:
        return None
    return st.st_mtime
