"""L2: a guest QEMU boots inside L1 (TCG inside TCG, or KVM in L1) with L1's e1000e functions passed
through by VFIO. Its busybox init lists the PCI devices it sees, prints a marker and
powers off; `boot_l2` runs that QEMU in the foreground and parses the console.

L1 must be prepared first: the functions (their whole IOMMU group) bound to vfio-pci,
and 2 MiB hugepages mounted at `mem_path`."""

from __future__ import annotations

import logging
import re
import secrets
import shlex
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.rig import cpio, initramfs
from tests.rig.failures import RigError, described
from tests.rig.rig import Rig
from vmharness.errors import HarnessError

log = logging.getLogger("tests.rig.l2")

PCI_TAG = "L2-PCI"
DONE_TAG = "L2-DONE"
INIT_TEMPLATE = Path(__file__).with_name("l2-init.sh")
CMDLINE = "console=ttyS0 panic=-1 quiet cryptomgr.notests rodata=off mitigations=off"
"""quiet: every console byte costs twice-emulated port I/O. The rest skips the crypto
self-tests, the read-only remapping with its W+X check, and mitigation setup: about a
sixth of L2's boot, and nothing this throwaway guest needs."""
FIRST_SLOT = 2
"""The first passed-through function is at 0000:00:02.0 in L2, the next at 03.0, ..."""
GRACE = 30.0  # beyond `timeout`: QEMU's own `timeout` in L1 fires first, then rig.run's
KILL_AFTER = 10.0
"""Seconds `timeout` gives L2's QEMU after its SIGTERM. Then it sends SIGKILL to its whole process group,
itself included, so its own status is -9 rather than 137 (coreutils' timeout.c: a loaded clean clone's
QEMU in L1 took longer than this to act on the SIGTERM)."""

_RUN = 'exec "$@" 2>"$L2_STDERR"'
_REAP = r"""
d=$1
pid=$(cat "$d/qemu.pid" 2>/dev/null)
alive() { [ -n "$pid" ] && grep -qF -- "$d" "/proc/$pid/cmdline" 2>/dev/null; }
if alive; then
    echo "killing L2 QEMU $pid"
    kill -KILL "$pid"
    i=0
    while alive && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    if alive; then echo "L2 QEMU $pid is still running" >&2; exit 1; fi
fi
rm -rf -- "$d"
"""
_LINE = re.compile(rf"{PCI_TAG} (\S+) ([0-9a-f]{{4}}):([0-9a-f]{{4}}) 0x([0-9a-f]{{6}})")
_DONE = re.compile(rf"{DONE_TAG} ([0-9.]+)")


class L2Error(RigError):
    """L2 did not boot to its marker."""


@dataclass(frozen=True)
class PciDevice:
    bdf: str
    vendor: str  # "8086"
    device: str  # "10d3"
    pci_class: int  # 0x020000: class, subclass, programming interface


CHIPSET = (
    PciDevice("0000:00:00.0", "8086", "29c0", 0x060000),  # q35 host bridge
    PciDevice("0000:00:1f.0", "8086", "2918", 0x060100),  # ICH9 LPC (ISA bridge)
)
"""What else L2 has on PCI: q35 with -nodefaults, sata=off and smbus=off."""


@dataclass(frozen=True)
class L2Result:
    console: str
    devices: tuple[PciDevice, ...]
    """Every PCI device L2 listed, in its sysfs order."""
    assigned: Mapping[str, str]
    """L1 BDF of each passed-through function -> its BDF in L2."""
    seconds: float
    """Wall time of L2's QEMU, start to exit, measured on L0."""
    uptime: float
    """L2's /proc/uptime at the marker: its kernel's boot to the end of the listing."""
    stderr: str

    def at(self, bdf: str) -> PciDevice | None:
        return next((d for d in self.devices if d.bdf == bdf), None)


def guest_bdf(index: int) -> str:
    return f"0000:00:{FIRST_SLOT + index:02x}.0"


def build_initramfs() -> Path:
    """The (cached) L2 initramfs: static busybox and l2-init.sh, no kernel modules."""
    init = INIT_TEMPLATE.read_text().replace("@PCI_TAG@", PCI_TAG).replace("@DONE_TAG@", DONE_TAG)
    if left := re.findall(r"@[A-Z0-9_]+@", init):
        raise HarnessError(f"{INIT_TEMPLATE.name} has placeholders nobody fills: {left}")
    entries = [cpio.directory(d) for d in ("bin", "dev", "proc", "sys")]
    entries += [
        cpio.chardev("dev/console", 5, 1),
        cpio.file("bin/busybox", initramfs.busybox(), 0o755),
        cpio.file("init", init.encode(), 0o755),
    ]
    return initramfs.cached(cpio.archive(entries), "l2-initramfs")


def qemu_argv(
    kernel: Path,
    initrd: Path,
    *,
    bdfs: Sequence[str],
    mem_path: str,
    mem_mib: int,
    run_dir: str,
    host_node: int | None = None,
    accel: str = "tcg",
) -> list[str]:
    """One CPU, no default devices, and the functions in `bdfs` at guest_bdf(0), (1), ...
    `accel`: "tcg", or "kvm" where L1 has loaded kvm_amd (L0's TCG emulates SVM with nested paging).
    RAM comes from a file under `mem_path` (hugetlbfs: VFIO pins all of it, and 2 MiB pages
    make that a few hundred mappings, not tens of thousands), given to the machine with
    `memory-backend=` rather than `-numa node,memdev=`: the same backend without a NUMA
    table L2 has no use for, and unlike `-mem-path` it can be bound to a host node."""
    backend = f"memory-backend-file,id=l2mem,size={mem_mib}M,mem-path={mem_path},share=on,prealloc=on"
    if host_node is not None:
        backend += f",host-nodes={host_node},policy=bind"
    argv = [
        "qemu-system-x86_64",
        "-name", "rig-l2",
        "-machine", f"q35,accel={accel},sata=off,smbus=off,memory-backend=l2mem",
        "-cpu", "max",
        "-smp", "1",
        "-m", f"{mem_mib}M",
        "-object", backend,
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-kernel", str(kernel),
        "-initrd", str(initrd),
        "-append", CMDLINE,
        "-serial", f"file:{run_dir}/console.log",
        "-pidfile", f"{run_dir}/qemu.pid",
    ]  # fmt: skip
    for i, bdf in enumerate(bdfs):
        # rombar=0: the firmware would otherwise read and run the NIC's boot ROM.
        argv += ["-device", f"vfio-pci,host={bdf},bus=pcie.0,addr={FIRST_SLOT + i:#x},rombar=0"]
    return argv


def parse(console: str) -> tuple[tuple[PciDevice, ...], float | None]:
    """The devices L2 listed, and its uptime at the marker (None: no marker)."""
    devices: list[PciDevice] = []
    uptime = None
    for line in console.splitlines():
        if m := _LINE.search(line):
            devices.append(PciDevice(m[1], m[2], m[3], int(m[4], 16)))
        elif m := _DONE.search(line):
            uptime = float(m[1])
    return tuple(devices), uptime


def boot_l2(
    rig: Rig,
    *,
    bdfs: Sequence[str],
    mem_path: str,
    mem_mib: int = 256,
    timeout: float = 600,
    host_node: int | None = None,
    accel: str = "tcg",
) -> L2Result:
    """Boot L2 in L1 with the L1 functions `bdfs` passed through and RAM from the hugetlbfs
    directory `mem_path` (bound to L1's NUMA node `host_node` if given); return once it
    powered off. Raises L2Error, with the end of L2's console and QEMU's stderr, if it does
    not reach its marker within `timeout` s; no L2 QEMU is left running either way."""
    # L1's kernel, as the ELF QEMU enters through PVH: QEMU in L1 loads its 60 MB in a
    # few seconds; L2 decompressing the 8 MB bzImage itself took about 30 s longer here.
    kernel, initrd = rig.kernel.boot_image, build_initramfs()
    run_dir = f"/tmp/rig-l2-{secrets.token_hex(4)}"
    rig.run(["mkdir", "-m", "700", run_dir], timeout=30, check=True)
    argv = qemu_argv(
        kernel, initrd, bdfs=bdfs, mem_path=mem_path, mem_mib=mem_mib, run_dir=run_dir, host_node=host_node,
        accel=accel,
    )
    wrapped = ["sh", "-c", _RUN, "rig-l2", "timeout", "-k", f"{KILL_AFTER:g}", f"{timeout:g}", *argv]
    log.info("booting L2 in L1: %s", shlex.join(argv))
    began = time.monotonic()
    problem: str | None = None
    code = None
    try:
        try:
            code = rig.run(wrapped, timeout=timeout + GRACE, env={"L2_STDERR": f"{run_dir}/qemu.err"}).returncode
        except HarnessError as exc:
            problem = exc.message
        seconds = time.monotonic() - began
        console, stderr = _read(rig, f"{run_dir}/console.log"), _read(rig, f"{run_dir}/qemu.err")
    finally:
        _reap(rig, run_dir)
    devices, uptime = parse(console)
    if problem is None and timed_out(code, seconds, timeout):
        problem = f"L2's QEMU did not exit within {timeout:g} s"
    elif problem is None and (code != 0 or uptime is None):
        problem = f"L2's QEMU exited with status {code}" + (f" before L2 printed {DONE_TAG}" if uptime is None else "")
    if problem is not None or uptime is None:
        raise _failure(problem or "no marker", console, stderr)
    log.info("L2 listed %d PCI devices; marker at %.1f s of its uptime, %.1f s in all", len(devices), uptime, seconds)
    assigned = {bdf: guest_bdf(i) for i, bdf in enumerate(bdfs)}
    return L2Result(console, devices, assigned, seconds, uptime, stderr)


def timed_out(code: int | None, seconds: float, timeout: float) -> bool:
    """Whether `timeout` ended L2's QEMU: its SIGTERM (124), its SIGKILL (137), or its SIGKILL to its own
    process group (-9), which comes only once `timeout` and KILL_AFTER have passed."""
    return code in (124, 137) or (code == -signal.SIGKILL and seconds >= timeout + KILL_AFTER)


def _read(rig: Rig, path: str) -> str:
    try:
        return rig.read_file(path, timeout=60).decode(errors="replace")
    except HarnessError as exc:
        return f"(cannot read {path}: {exc.message})"


def _reap(rig: Rig, run_dir: str) -> None:
    """Kill L2's QEMU if it still runs (its pidfile names it; its command line names
    `run_dir`), then remove `run_dir`. Raises if that QEMU cannot be stopped."""
    res = rig.run(["sh", "-c", _REAP, "rig-l2-reap", run_dir], timeout=60)
    if res.stdout.strip():
        log.warning("%s", res.stdout.strip())
    if not res.ok:
        raise L2Error(f"cleaning up L2 in L1 failed: {res.stderr.strip()}")


def _failure(what: str, console: str, stderr: str) -> L2Error:
    extra = [("L2 QEMU's stderr", stderr.strip()[-3000:] or "(empty)")]
    return L2Error(*described(what, "L2", console, extra, "last-failed-l2-console.log"))
