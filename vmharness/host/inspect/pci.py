"""PCI devices as sysfs describes them: identity, driver, IOMMU group, NUMA node, netdevs, SR-IOV."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmharness import digits
from vmharness.errors import HarnessError
from vmharness.host.inspect import pciids
from vmharness.model.bdf import parse_bdf
from vmharness.system import sysfs
from vmharness.system.root import HostRoot, check_tree_name

PCI_DEVICES = sysfs.PCI_DEVICES

CLASS_BRIDGE = 0x06


@dataclass(frozen=True)
class NetDev:
    name: str
    operstate: str | None
    master: str | None


@dataclass(frozen=True)
class PciDevice:
    bdf: str
    vendor_id: int
    device_id: int
    pci_class: int
    driver: str | None
    driver_override: str | None
    iommu_group: int | None
    numa_node: int | None
    netdevs: tuple[NetDev, ...]
    sriov_numvfs: int | None
    sriov_totalvfs: int | None
    physfn: str | None
    reset_methods: tuple[str, ...] | None
    vendor_name: str | None = None
    device_name: str | None = None
    class_name: str = ""

    @property
    def base_class(self) -> int:
        return self.pci_class >> 16

    @property
    def is_bridge(self) -> bool:
        return self.base_class == CLASS_BRIDGE

    @property
    def slot(self) -> str:
        """`DDDD:BB:DD`: the functions of one multi-function card share it."""
        return self.bdf.rsplit(".", 1)[0]

    @property
    def ids(self) -> str:
        return f"{self.vendor_id:04x}:{self.device_id:04x}"

    @property
    def name(self) -> str:
        """`Vendor Device [vvvv:dddd]`, or just the ids when no name database is installed."""
        if self.vendor_name and self.device_name:
            return f"{self.vendor_name} {self.device_name} [{self.ids}]"
        if self.vendor_name:
            return f"{self.vendor_name} [{self.ids}]"
        return f"[{self.ids}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "bdf": self.bdf,
            "vendor_id": f"{self.vendor_id:04x}",
            "device_id": f"{self.device_id:04x}",
            "vendor": self.vendor_name,
            "device": self.device_name,
            "class": f"{self.pci_class:06x}",
            "class_name": self.class_name,
            "driver": self.driver,
            "driver_override": self.driver_override,
            "iommu_group": self.iommu_group,
            "numa_node": self.numa_node,
            "netdevs": [n.name for n in self.netdevs],
            "sriov_numvfs": self.sriov_numvfs,
            "sriov_totalvfs": self.sriov_totalvfs,
            "physfn": self.physfn,
            "reset_methods": list(self.reset_methods) if self.reset_methods is not None else None,
            "bridge": self.is_bridge,
        }


def _hex(root: HostRoot, path: str) -> int:
    text = root.read_text(path).strip()
    value = digits.hexadecimal(text)
    if value is None:
        raise HarnessError(f"{path} holds {text[:40]!r}, not a hex number in ASCII digits", "the host root is damaged")
    return value


def _int_or_none(text: str | None) -> int | None:
    """A count or a group number as sysfs writes it (ASCII digits), None for anything else."""
    return digits.integer(text) if text is not None else None


def _netdevs(root: HostRoot, dev: str) -> tuple[NetDev, ...]:
    # Most drivers put netdevs in <dev>/net/; virtio-net one level down, in <dev>/virtioN/net/.
    dirs = [f"{dev}/net"] + [f"{dev}/{d}/net" for d in root.listdir(dev) if d.startswith("virtio")]
    found = []
    for d in dirs:
        for name in root.listdir(d):
            found.append(
                NetDev(
                    name=name,
                    operstate=root.read_optional(f"/sys/class/net/{name}/operstate"),
                    master=root.readlink_name(f"/sys/class/net/{name}/master"),
                )
            )
    return tuple(found)


def read_device(root: HostRoot, bdf: str) -> PciDevice:
    dev = f"{PCI_DEVICES}/{bdf}"
    if not root.exists(dev):
        raise HarnessError(
            f"no PCI device {bdf} on this host",
            "`vmharness host-groups` lists the devices and their addresses",
        )
    vendor, device, klass = _hex(root, f"{dev}/vendor"), _hex(root, f"{dev}/device"), _hex(root, f"{dev}/class")
    group = root.readlink_name(f"{dev}/iommu_group")
    numa = root.read_int(f"{dev}/numa_node", minimum=-1)  # garbage names the file; -1: no node
    reset = root.read_optional(f"{dev}/reset_method")
    override = root.read_optional(f"{dev}/driver_override")
    if override is not None:
        check_tree_name(override, f"{dev}/driver_override")
    names = pciids.load()
    return PciDevice(
        bdf=bdf,
        vendor_id=vendor,
        device_id=device,
        pci_class=klass,
        driver=root.readlink_name(f"{dev}/driver"),
        driver_override=None if override in (None, "(null)", "") else override,
        iommu_group=_int_or_none(group),
        numa_node=None if numa is None or numa < 0 else numa,
        netdevs=_netdevs(root, dev),
        sriov_numvfs=_int_or_none(root.read_optional(f"{dev}/sriov_numvfs")),
        sriov_totalvfs=_int_or_none(root.read_optional(f"{dev}/sriov_totalvfs")),
        physfn=root.readlink_name(f"{dev}/physfn"),
        reset_methods=tuple(reset.split()) if reset is not None else None,
        vendor_name=names.vendor(vendor),
        device_name=names.device(vendor, device),
        class_name=names.class_name(klass),
    )


def scan(root: HostRoot) -> list[PciDevice]:
    """Every PCI device of the host, in address order."""
    if not root.is_dir(PCI_DEVICES):
        raise HarnessError(
            f"{PCI_DEVICES} is missing under host root {root.base}",
            "is /sys mounted? on a snapshot, unpack the whole tarball",
        )
    return [read_device(root, bdf) for bdf in root.listdir(PCI_DEVICES)]


def find(root: HostRoot, bdf_text: str) -> PciDevice:
    return read_device(root, parse_bdf(bdf_text))
