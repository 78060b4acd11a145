"""What a host-check row answers (`Check`: a status, what was found, the fix) and what the rows read,
read once (`Facts`): the CPU's flags and vendor, the kernel cmdline, the IOMMUs and their groups, and
the live host's probes (a snapshot's as host-snapshot recorded them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmharness.digits import is_digits
from vmharness.host.inspect import probes
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


def live(f: Facts, key: str, name: str) -> dict[str, Any] | Check:
    if f.live is None or key not in f.live:
        return Check(name, SKIP, "not measured: this host root is not the live host and not a host-snapshot",
                     "run host-check on the host itself, or snapshot it with host-snapshot")
    value: dict[str, Any] = f.live[key]
    return value


def live_flag(f: Facts, key: str, name: str, flag: str, fix: str) -> Check:
    """A live-only fact of the form {flag: bool, detail: str}."""
    data = live(f, key, name)
    if isinstance(data, Check):
        return data
    return Check(name, PASS, data["detail"]) if data.get(flag) else Check(name, FAIL, data["detail"], fix)
