"""host-check: can this host pass a NIC through to a KVM guest? One row per fact, each with its fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vmharness.digits import is_digits
from vmharness.host.inspect import hugepages, modules, probes
from vmharness.system.root import LARGE_READ, HostRoot

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"
ACPI_TABLES = "/sys/firmware/acpi/tables"
FIRMWARE_IOMMU = {"DMAR": "Intel VT-d", "IVRS": "AMD-Vi", "VIOT": "virtio-iommu"}


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class Facts:
    """What several checks read, read once."""

    root: HostRoot
    cpu_flags: frozenset[str]
    cpu_vendor: str | None
    cmdline: list[str]
    iommus: list[str]
    groups: int
    live: dict[str, Any] | None

    @property
    def vendor(self) -> str:
        """Whose IOMMU: the firmware table says (a TCG guest can pair an AMD CPU with VT-d); else the CPU."""
        if self.root.exists(f"{ACPI_TABLES}/DMAR"):
            return "intel"
        if self.root.exists(f"{ACPI_TABLES}/IVRS"):
            return "amd"
        if self.cpu_vendor is not None:
            return "amd" if "AMD" in self.cpu_vendor else "intel"
        return "amd" if "svm" in self.cpu_flags else "intel"

    def param(self, key: str) -> str | None:
        """The last value a kernel parameter was given on the cmdline (the one the kernel uses)."""
        found = None
        for arg in self.cmdline:
            k, _, v = arg.partition("=")
            if k == key:
                found = v
        return found


def gather(root: HostRoot) -> Facts:
    flags: set[str] = set()
    vendor = None
    for line in (root.read_optional("/proc/cpuinfo", limit=LARGE_READ) or "").splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
        elif line.startswith("vendor_id"):
            vendor = line.split(":", 1)[1].strip()
    cmdline = (root.read_optional("/proc/cmdline") or "").split()
    if "--" in cmdline:
        cmdline = cmdline[: cmdline.index("--")]  # what follows goes to init, not the kernel
    groups = [g for g in root.listdir("/sys/kernel/iommu_groups") if is_digits(g)]
    return Facts(
        root, frozenset(flags), vendor, cmdline, root.listdir("/sys/class/iommu"), len(groups), probes.load(root)
    )


def cpu_virt(f: Facts) -> Check:
    if "vmx" in f.cpu_flags:
        return Check("CPU virtualization", PASS, "vmx (Intel VT-x)")
    if "svm" in f.cpu_flags:
        return Check("CPU virtualization", PASS, "svm (AMD-V)")
    return Check(
        "CPU virtualization", FAIL, "neither vmx nor svm in /proc/cpuinfo flags",
        "enable VT-x/AMD-V in the firmware setup (in a VM: nested virtualization on the outer host)",
    )


def kvm_device(f: Facts) -> Check:
    if f.root.exists("/dev/kvm"):
        return Check("/dev/kvm", PASS, "present")
    return Check("/dev/kvm", FAIL, "missing", "modprobe kvm_intel (or kvm_amd); enable virtualization in firmware")


def _live(f: Facts, key: str, name: str) -> dict[str, Any] | Check:
    if f.live is None or key not in f.live:
        return Check(name, SKIP, "not measured: this host root is not the live host and not a host-snapshot",
                     "run host-check on the host itself, or snapshot it with host-snapshot")
    value: dict[str, Any] = f.live[key]
    return value


def _live_flag(f: Facts, key: str, name: str, flag: str, fix: str) -> Check:
    """A live-only fact of the form {flag: bool, detail: str}."""
    data = _live(f, key, name)
    if isinstance(data, Check):
        return data
    return Check(name, PASS, data["detail"]) if data.get(flag) else Check(name, FAIL, data["detail"], fix)


def kvm_usable(f: Facts) -> Check:
    return _live_flag(f, "kvm", "KVM usable", "usable",
                      "guests must run under TCG (slow); fix nested virtualization or use bare metal")


def iommu_firmware(f: Facts) -> Check:
    name = "IOMMU in firmware"
    found = [f"{t} ({what})" for t, what in FIRMWARE_IOMMU.items() if f.root.exists(f"{ACPI_TABLES}/{t}")]
    if found:
        return Check(name, PASS, "ACPI table " + ", ".join(found))
    if not f.root.exists(ACPI_TABLES):
        return Check(name, WARN, f"{ACPI_TABLES} is missing: cannot tell",
                     "on a non-ACPI machine check the firmware documentation")
    fix = "enable VT-d" if f.vendor == "intel" else "enable AMD-Vi / IOMMU"
    return Check(name, FAIL, "no DMAR or IVRS ACPI table: the firmware does not offer an IOMMU",
                 f"{fix} in the firmware setup (in a VM: -device intel-iommu)")


def iommu_kernel(f: Facts) -> Check:
    name = "IOMMU in kernel"
    if f.iommus and f.groups:
        return Check(name, PASS, f"enabled: {', '.join(f.iommus)}; {f.groups} IOMMU groups")
    if f.iommus:
        return Check(name, FAIL, f"{', '.join(f.iommus)} registered but no IOMMU groups",
                     "check dmesg for DMAR/AMD-Vi errors")
    if iommu_firmware(f).status == PASS and f.vendor == "intel":
        return Check(name, FAIL, "the firmware has an IOMMU but the kernel did not enable it",
                     "add intel_iommu=on to the kernel cmdline and reboot (vmharness host-setup --print)")
    return Check(name, FAIL, "no IOMMU registered (/sys/class/iommu is empty), no IOMMU groups",
                 "enable the IOMMU in firmware first, then on the kernel cmdline")


def iommu_cmdline(f: Facts) -> Check:
    name = "IOMMU on cmdline"
    intel, amd, generic = f.param("intel_iommu"), f.param("amd_iommu"), f.param("iommu")
    shown = " ".join(a for a in f.cmdline if a.split("=")[0] in ("intel_iommu", "amd_iommu", "iommu"))
    off = [k for k, v in (("intel_iommu", intel), ("amd_iommu", amd), ("iommu", generic)) if v == "off"]
    if off:
        return Check(name, FAIL, f"{' '.join(o + '=off' for o in off)} turns it off",
                     "remove it from the kernel cmdline and reboot")
    pt = " (iommu=pt: host devices bypass translation)" if generic == "pt" else ""
    if f.vendor == "intel":
        if intel is not None and "on" in intel.split(","):
            return Check(name, PASS, f"{shown}{pt}")
        if f.iommus:
            return Check(name, PASS, f"intel_iommu=on absent, but the kernel enabled it by default{pt}")
        return Check(name, FAIL, f"intel_iommu=on is missing{': ' + shown if shown else ''}",
                     "add intel_iommu=on iommu=pt to the kernel cmdline and reboot")
    if f.iommus:  # AMD-Vi is on by default when the firmware has IVRS
        return Check(name, PASS, f"{shown or 'AMD-Vi on by default'}{pt}")
    return Check(name, FAIL, f"AMD-Vi is not enabled{': ' + shown if shown else ''}",
                 "enable the IOMMU in firmware; add iommu=pt to the kernel cmdline")


def interrupt_remapping(f: Facts) -> Check:
    name = "interrupt remapping"
    interrupts = f.root.read_optional("/proc/interrupts", limit=LARGE_READ) or ""
    if re.search(r"\bIR-", interrupts):
        return Check(name, PASS, "on (IR- interrupt chips in /proc/interrupts)")
    unsafe = f.root.read_optional("/sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts")
    if not f.iommus:
        return Check(name, FAIL, "off: it needs the IOMMU, which is off", "enable the IOMMU first")
    if unsafe in ("Y", "1"):
        return Check(name, WARN, "off; vfio_iommu_type1.allow_unsafe_interrupts=Y lets VFIO run without it",
                     "enable x2APIC/interrupt remapping in firmware to drop the unsafe override")
    return Check(name, FAIL, "off: VFIO refuses to assign devices without it",
                 "enable x2APIC/interrupt remapping in firmware, or (unsafe) "
                 "vfio_iommu_type1.allow_unsafe_interrupts=1")


def _module_check(name: str) -> Callable[[Facts], Check]:
    def check(f: Facts) -> Check:
        st = modules.state(f.root, name)
        if st.available:
            return Check(f"module {name}", PASS, st.detail)
        return Check(f"module {name}", FAIL, st.detail,
                     "install the kernel's modules package, or use a kernel with CONFIG_VFIO_PCI")
    return check


def hugepage_sizes(f: Facts) -> Check:
    name = "hugepages"
    sizes = hugepages.sizes(f.root)
    if not sizes:
        return Check(name, FAIL, "no hugepage sizes in /sys/kernel/mm/hugepages",
                     "use a kernel with CONFIG_HUGETLBFS")
    parts = []
    for kib in sizes:
        per = [p for p in hugepages.per_node(f.root) if p.size_kib == kib]
        nodes = ", ".join(f"node{p.node} {p.free}/{p.total} free" for p in per)
        parts.append(f"{hugepages.size_label(kib)}: {nodes or 'no per-node data'}")
    if 1024 * 1024 not in sizes:
        return Check(name, WARN, "; ".join(parts) + " (no 1G pages)",
                     "1 GiB pages need the pdpe1gb CPU flag; 2 MiB pages work too")
    return Check(name, PASS, "; ".join(parts))


def hugetlbfs(f: Facts) -> Check:
    name = "hugetlbfs"
    found = hugepages.mounts(f.root)
    if not found:
        return Check(name, WARN, "not mounted", "host-prepare --hugepages mounts it")
    shown = ", ".join(
        f"{m.path} (pagesize {hugepages.size_label(m.pagesize_kib) if m.pagesize_kib else '?'})" for m in found
    )
    return Check(name, PASS, shown)


_POOL_HEADER = ["Size", "Minimum", "Current", "Maximum", "Default"]


@dataclass(frozen=True)
class Pool:
    """One row of `hugeadm --pool-list`: a page size and its pool, in pages."""

    size_kib: int
    minimum: int
    current: int
    maximum: int
    default: bool


def parse_pool_list(text: str) -> list[Pool]:
    """`hugeadm --pool-list` output: a header, then `SIZE_BYTES MIN CURRENT MAX [*]` per page size
    (`*` marks the default size). ValueError naming the line that does not fit."""
    lines = [(n, line.split()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines or lines[0][1] != _POOL_HEADER:
        raise ValueError(f"line 1 is not the header {' '.join(_POOL_HEADER)!r}")
    pools = []
    for n, cols in lines[1:]:
        numbers, star = (cols[:4], cols[4:])
        if len(numbers) != 4 or star not in ([], ["*"]) or not all(is_digits(c) and len(c) < 20 for c in numbers):
            raise ValueError(f"line {n} is not 'SIZE MINIMUM CURRENT MAXIMUM [*]': {' '.join(cols)[:60]!r}")
        size, low, now, high = (int(c) for c in numbers)
        if size < 1024 or size % 1024:
            raise ValueError(f"line {n}: {size} is not a page size in bytes")
        pools.append(Pool(size // 1024, low, now, high, star == ["*"]))
    return pools


def hugeadm_pools(f: Facts) -> Check:
    """libhugetlbfs' view of the pools, when its tool is installed: a second reading of the counters
    the hugepages row reads, in the form the libhugetlbfs documentation uses. Run on the live host
    (a snapshot stores what it printed)."""
    name = "hugeadm pools"
    data = f.live.get("hugeadm") if f.live is not None else None
    if not isinstance(data, dict):
        return Check(name, SKIP, "not run on a host root", "run host-check on the host itself")
    if not data.get("installed"):
        return Check(name, SKIP, "hugeadm is not installed (optional)",
                     "apt-get install libhugetlbfs-bin (dnf install libhugetlbfs-utils) for libhugetlbfs' view")
    output = data.get("pool_list")
    if not isinstance(output, str):
        return Check(name, WARN, str(data.get("error", "no output recorded"))[:300],
                     "run it by hand: hugeadm --pool-list")
    try:
        pools = parse_pool_list(output)
    except ValueError as exc:
        return Check(name, WARN, f"hugeadm --pool-list printed something unexpected: {exc}",
                     "run it by hand: hugeadm --pool-list")
    if not pools:
        return Check(name, WARN, "hugeadm lists no page sizes", "use a kernel with CONFIG_HUGETLBFS")
    shown = "; ".join(
        f"{hugepages.size_label(p.size_kib)}{' (default)' if p.default else ''}: minimum {p.minimum}, "
        f"current {p.current}, maximum {p.maximum}" for p in pools)
    return Check(name, PASS, shown)


def libvirt(f: Facts) -> Check:
    return _live_flag(f, "libvirtd", "libvirtd", "reachable", "start it: libvirtd -d (or systemctl start libvirtd)")


def qemu(f: Facts) -> Check:
    name = "QEMU"
    data = _live(f, "qemu", name)
    if isinstance(data, Check):
        return data
    if data.get("version"):
        return Check(name, PASS, f"{data['version']} ({data['path']})")
    if data.get("path"):
        return Check(name, FAIL, f"{data['path']} does not report a version", "reinstall qemu-system-x86")
    return Check(name, FAIL, f"{probes.QEMU} not found", "apt-get install qemu-system-x86")


CHECKS: tuple[Callable[[Facts], Check], ...] = (
    cpu_virt, kvm_device, kvm_usable, iommu_firmware, iommu_kernel, iommu_cmdline,
    interrupt_remapping, _module_check("vfio-pci"), _module_check("vfio_iommu_type1"),
    hugepage_sizes, hugetlbfs, hugeadm_pools, libvirt, qemu,
)


def run_checks(root: HostRoot) -> list[Check]:
    facts = gather(root)
    return [check(facts) for check in CHECKS]
