"""host-snapshot: a small tarball of exactly what the inspection commands read, laid out like `/`.

Those commands are host-check, host-groups, host-prepare --dry-run, tune plan and run --print-xml;
tests/integration/test_snapshot_complete.py runs each on this host and on its snapshot, and checks
that the outputs are equal and that every path read on the snapshot is in it (root.recording()).

Symlinks are stored as the kernel wrote them (relative), so `--host-root` on the unpacked tree
resolves them inside it. Device nodes become empty files (only their existence is read). MAC
addresses, serial numbers and file contents outside this list are not taken; of /proc/sys only what
any user may read (the kernel makes secrets such as tcp_fastopen_key root-only); of the journal only
the driver bindings and hugepages it records (what a run would take over from host-prepare).
Works on any host root, so a snapshot can be taken of a snapshot; what is not a regular file there
(a FIFO, a device node where an attribute should be) is left out, never opened: opening one can
block or act on a device. A damaged journal is an error naming it, as it is for every command.
The tarball is never written inside the host root it describes (a host root is read-only), nor over
a file an earlier snapshot did not write (host/snapshot/file.py).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import stat
import tarfile
from pathlib import Path

from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.host.inspect import cpubits, hugepages, modules, probes, vfio_users
from vmharness.host.inspect.checks import ACPI_TABLES, FIRMWARE_IOMMU
from vmharness.host.inspect.iommu import GROUPS
from vmharness.host.inspect.pci import PCI_DEVICES
from vmharness.host.libvirt import hugetlbfs
from vmharness.host.snapshot import file
from vmharness.journal import journal
from vmharness.system.root import LARGE_READ, HostRoot
from vmharness.userfile import read_file

PROC_FILES = (
    "/proc/cmdline", "/proc/cpuinfo", "/proc/meminfo", "/proc/interrupts", "/proc/mounts",
    "/proc/modules", "/proc/sys/kernel/osrelease", "/proc/net/route", "/proc/net/ipv6_route",
    "/proc/net/fib_trie", "/proc/net/if_inet6", "/proc/net/dev", "/proc/net/vlan/config",
)
PCI_ATTRS = (
    "vendor", "device", "class", "subsystem_vendor", "subsystem_device", "revision", "numa_node",
    "local_cpulist", "driver_override", "reset_method", "sriov_numvfs", "sriov_totalvfs", "enable",
)
PCI_LINKS = ("driver", "iommu_group", "physfn")
NETDEV_ATTRS = ("operstate", "ifindex", "type", "flags", "mtu")
QUEUE_ATTRS = ("rps_cpus", "rps_flow_cnt", "xps_cpus")
IRQ_ATTRS = ("smp_affinity", "smp_affinity_list", "effective_affinity", "effective_affinity_list", "node")
CPU = "/sys/devices/system/cpu"
CPUFREQ_ATTRS = ("scaling_governor", "scaling_available_governors", "scaling_driver")
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0"
# Directories whose files tuning reads as they are: THP, KSM, and the sysctl families a profile sets.
TUNING_DIRS = ("/sys/kernel/mm/transparent_hugepage", "/sys/kernel/mm/ksm")
SYSCTL_DIRS = ("/proc/sys/net/core", "/proc/sys/net/ipv4", "/proc/sys/fs", "/proc/sys/vm")
JOURNAL_OPS = ("bind", "pages", "released", "owner")  # what host-prepare --dry-run and run read of it
HUGEPAGE_ATTRS = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
                  "nr_overcommit_hugepages")
MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1", "vfio_pci_core", "kvm", "kvm_intel", "kvm_amd")
DEVICE_NODES = ("/dev/kvm", "/dev/vfio")


class _Writer:
    def __init__(self, root: HostRoot, tar: tarfile.TarFile) -> None:
        self.root = root
        self.tar = tar
        self.seen: set[str] = set()

    def _info(self, path: str, kind: bytes) -> tarfile.TarInfo | None:
        name = path.lstrip("/")
        if not name or name in self.seen:
            return None
        parent = os.path.dirname(name)
        if parent:
            self.dir("/" + parent)
        self.seen.add(name)
        info = tarfile.TarInfo(name)
        info.type, info.mtime, info.mode = kind, 0, 0o755 if kind == tarfile.DIRTYPE else 0o644
        return info

    def dir(self, path: str) -> None:
        info = self._info(path, tarfile.DIRTYPE)
        if info is not None:
            self.tar.addfile(info)

    def data(self, path: str, content: bytes) -> None:
        info = self._info(path, tarfile.REGTYPE)
        if info is not None:
            info.size = len(content)
            self.tar.addfile(info, io.BytesIO(content))

    def file(self, path: str, readable: int = 0o444) -> None:
        """Copy a regular file if it exists and can be read (by someone in `readable`: 0o004 for what
        any user may read); sysfs attributes some devices refuse, and anything that is not a regular
        file, are skipped."""
        real = self.root.path(path)
        try:
            mode = os.stat(real).st_mode
        except OSError:
            return
        if not stat.S_ISREG(mode) or not mode & readable:  # write-only attributes have no content
            return
        self.root.realpath(path)  # refused if it leads out of the root
        try:
            content = read_file(real, path, LARGE_READ)
        except PermissionError as exc:
            raise HarnessError(f"no permission to read {path}", "run host-snapshot as root") from exc
        except HarnessError:  # it changed into something else since the stat: leave it out
            return
        except OSError:
            return
        self.data(path, content)

    def link(self, path: str) -> None:
        real = self.root.path(path)
        if not real.is_symlink():
            return
        info = self._info(path, tarfile.SYMTYPE)
        if info is not None:
            info.linkname = os.readlink(real)
            self.tar.addfile(info)

    def follow(self, path: str) -> str | None:
        """Record every symlink on the way to `path` (each as the kernel wrote it) and the directories
        they lead to; returns the host path it resolves to, or None if it does not exist."""
        self.root.realpath(path)  # refused if it leads out of the root
        done, todo, hops = "/", [p for p in path.split("/") if p], 0
        while todo:
            part = todo.pop(0)
            if part in (".", ".."):
                done = os.path.dirname(done) if part == ".." else done
                continue
            here = os.path.join(done, part)
            real = self.root.path(here)
            if real.is_symlink():
                hops += 1
                if hops > 40:  # a loop; the kernel gives up at 40 too
                    return None
                self.link(here)
                target = os.readlink(real)
                done = "/" if target.startswith("/") else done
                todo = [p for p in target.split("/") if p] + todo
                continue
            if not os.path.lexists(real):
                return None
            done = here
        if self.root.is_dir(done):
            self.dir(done)
        return done

    def files_in(self, path: str, readable: int = 0o444) -> None:
        """Every regular file directly in a directory (not its subdirectories)."""
        real = self.follow(path)
        if real is not None:
            for name in self.root.listdir(real):
                self.file(f"{real}/{name}", readable)

    def real_dir(self, path: str) -> str:
        """Record the directory a symlink points to, and return its host path."""
        target = self.root.realpath(path)
        self.dir(target)
        return target


def _pci(w: _Writer) -> None:
    root = w.root
    w.dir(PCI_DEVICES)
    for drv in root.listdir("/sys/bus/pci/drivers"):
        w.dir(f"/sys/bus/pci/drivers/{drv}")
        if root.exists(f"/sys/bus/pci/drivers/{drv}/module"):
            w.link(f"/sys/bus/pci/drivers/{drv}/module")
            w.real_dir(f"/sys/bus/pci/drivers/{drv}/module")
    for bdf in root.listdir(PCI_DEVICES):
        w.link(f"{PCI_DEVICES}/{bdf}")
        dev = w.real_dir(f"{PCI_DEVICES}/{bdf}")
        for attr in PCI_ATTRS:
            w.file(f"{dev}/{attr}")
        for link in PCI_LINKS + tuple(n for n in root.listdir(dev) if n.startswith("virtfn")):
            w.link(f"{dev}/{link}")
        _msi(w, dev)
        for sub in ["net"] + [n for n in root.listdir(dev) if n.startswith("virtio")]:
            base = f"{dev}/{sub}" if sub == "net" else f"{dev}/{sub}/net"
            for ifname in root.listdir(base):
                w.dir(f"{base}/{ifname}")


def _msi(w: _Writer, dev: str) -> None:
    """A device's MSI vectors, and where each interrupt may run (tuning's queue->IRQ->CPU plan)."""
    w.files_in(f"{dev}/msi_irqs")
    for irq in w.root.listdir(f"{dev}/msi_irqs"):
        if is_digits(irq):
            for attr in IRQ_ATTRS:
                w.file(f"/proc/irq/{irq}/{attr}")


def _net(w: _Writer) -> None:
    for ifname in w.root.listdir("/sys/class/net"):
        path = f"/sys/class/net/{ifname}"
        w.link(path)
        target = w.real_dir(path)
        for attr in NETDEV_ATTRS:
            w.file(f"{target}/{attr}")
        w.link(f"{target}/master")
        _stack(w, target)
        _queues(w, target)
        device = w.follow(f"{target}/device")  # a PCI function, or a virtio device on one
        if device is not None:
            w.file(f"{device}/uevent")  # its driver and modalias: tuning takes NICs that have one
            _msi(w, device)


def _queues(w: _Writer, target: str) -> None:
    for queue in w.root.listdir(f"{target}/queues"):
        w.dir(f"{target}/queues/{queue}")
        for attr in QUEUE_ATTRS:
            w.file(f"{target}/queues/{queue}/{attr}")


def _stack(w: _Writer, target: str) -> None:
    """What the SSH guard reads of a netdev's stack (netstate): its upper and lower links, a bridge's
    ports and a bond's slaves."""
    entries = w.root.listdir(target)
    for entry in entries:
        if entry.startswith(("upper_", "lower_")):
            w.link(f"{target}/{entry}")
    if "bridge" in entries:
        w.dir(f"{target}/bridge")
    for port in w.root.listdir(f"{target}/brif"):
        w.link(f"{target}/brif/{port}")
    w.file(f"{target}/bonding/slaves")


def _iommu(w: _Writer) -> None:
    root = w.root
    w.dir(GROUPS)
    for group in root.listdir(GROUPS):
        w.file(f"{GROUPS}/{group}/type")
        w.dir(f"{GROUPS}/{group}/devices")
        for dev in root.listdir(f"{GROUPS}/{group}/devices"):
            w.link(f"{GROUPS}/{group}/devices/{dev}")
    w.dir("/sys/class/iommu")
    for unit in root.listdir("/sys/class/iommu"):
        w.link(f"/sys/class/iommu/{unit}")
        target = w.real_dir(f"/sys/class/iommu/{unit}")
        for sub in ("intel-iommu", "amd-iommu"):
            for attr in root.listdir(f"{target}/{sub}"):
                w.file(f"{target}/{sub}/{attr}")
    for table in FIRMWARE_IOMMU:
        w.file(f"{ACPI_TABLES}/{table}")
    w.dir(ACPI_TABLES)


def _memory(w: _Writer) -> None:
    root = w.root
    for kib in hugepages.sizes(root):
        for attr in HUGEPAGE_ATTRS:
            w.file(f"{hugepages.GLOBAL}/hugepages-{kib}kB/{attr}")
    for name in ("online", "possible", "has_cpu", "has_memory"):
        w.file(f"{hugepages.NODES}/{name}")
    for name in ("online", "possible"):
        w.file(f"{CPU}/{name}")
    for node in hugepages.nodes(root):
        base = f"{hugepages.NODES}/node{node}"
        w.file(f"{base}/cpulist")
        w.file(f"{base}/meminfo")
        for d in root.listdir(f"{base}/hugepages"):
            for attr in HUGEPAGE_ATTRS:
                w.file(f"{base}/hugepages/{d}/{attr}")


def _kernel(w: _Writer) -> None:
    root = w.root
    for path in PROC_FILES:
        w.file(path)
    w.files_in(cpubits.VULNERABILITIES)  # the host's verdicts, which a `*-no` CPU bit is checked against
    for mod in MODULES:
        if root.exists(f"/sys/module/{mod}"):
            w.dir(f"/sys/module/{mod}")
            w.file(f"/sys/module/{mod}/initstate")
            for p in root.listdir(f"/sys/module/{mod}/parameters"):
                w.file(f"/sys/module/{mod}/parameters/{p}")
    rel = modules.kernel_release(root)
    if rel and re.fullmatch(r"[\w.+~-]+", rel):
        for name in ("modules.dep", "modules.builtin"):
            w.file(f"/lib/modules/{rel}/{name}")
    for node in DEVICE_NODES:
        if root.is_dir(node):
            for entry in root.listdir(node):
                w.data(f"{node}/{entry}", b"")
            w.dir(node)
        elif root.exists(node):
            w.data(node, b"")


def _tuning(w: _Writer) -> None:
    """What a tuning plan reads besides the NICs: clocksource, governors, THP, KSM and sysctls."""
    for name in ("available_clocksource", "current_clocksource"):
        w.file(f"{CLOCKSOURCE}/{name}")
    for cpu in w.root.listdir(CPU):
        if re.fullmatch(r"cpu[0-9]{1,5}", cpu):
            for attr in CPUFREQ_ATTRS:
                real = w.follow(f"{CPU}/{cpu}/cpufreq/{attr}")  # cpufreq links to ../cpufreq/policyN
                if real is not None:
                    w.file(real)
    for path in TUNING_DIRS:
        w.files_in(path)
    for path in SYSCTL_DIRS:
        w.files_in(path, readable=0o004)


def _domains(w: _Writer) -> None:
    """The running libvirt domains' PCI devices (a NIC another guest holds is refused): each status
    file as vfio_users.digest cuts it down."""
    if not w.root.is_dir(vfio_users.LIBVIRT_RUN):
        return
    w.dir(vfio_users.LIBVIRT_RUN)
    for name in w.root.listdir(vfio_users.LIBVIRT_RUN):
        if name.endswith(".xml"):
            try:
                text = w.root.read_optional(f"{vfio_users.LIBVIRT_RUN}/{name}")
            except HarnessError:  # not a regular file, or too large for a status file: left out
                continue
            if text is not None:
                w.data(f"{vfio_users.LIBVIRT_RUN}/{name}", vfio_users.digest(text))


def _journal(w: _Writer) -> None:
    """The journal's driver bindings and hugepages, with the markers that say which are given back:
    what `run` takes over from host-prepare and what host-prepare calls its own."""
    if not w.root.path(journal.JOURNAL).is_file():  # none, or not a regular file: left out, never opened
        return
    kept = [r for r in journal.read(w.root) if r["op"] in JOURNAL_OPS]  # may be none: an empty journal
    w.data(journal.JOURNAL, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept).encode())


def build(root: HostRoot) -> bytes:
    """The snapshot of `root`, a .tar.gz."""
    if not root.is_dir(PCI_DEVICES):
        raise HarnessError(f"{root.base} has no {PCI_DEVICES}: nothing to snapshot", "is /sys mounted?")
    live = probes.load(root)
    if live is not None and root.live:  # what the libvirt daemon can see, read back by libvirt/hugetlbfs.py
        live = {**live, "libvirt": hugetlbfs.measure(root)}
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        w = _Writer(root, tar)
        for part in (_kernel, _pci, _net, _iommu, _memory, _tuning, _domains, _journal):
            part(w)
        if live is not None:
            w.data(probes.PROBES_FILE, json.dumps(live, indent=2, sort_keys=True).encode())
    return buf.getvalue()


def write(root: HostRoot, out: Path, force: bool = False) -> int:
    """Write the snapshot of `root` to `out` (host/snapshot/file.py says where it may go); returns its
    size in bytes."""
    file.check(root, out, force)
    data = build(root)
    file.save(root, out, data, force)
    return len(data)
