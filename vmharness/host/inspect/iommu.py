"""IOMMU groups, what is in them, and whether each can be handed to VFIO as a whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmharness.digits import is_digits
from vmharness.host.inspect.net import survey
from vmharness.host.inspect.net.verdict import InUse, in_use
from vmharness.host.inspect.pci import PciDevice, find, scan
from vmharness.system.root import HostRoot

GROUPS = "/sys/kernel/iommu_groups"
# Drivers a group member may keep while the group is used through VFIO: the kernel lets drivers
# that manage no DMA (pci-stub, pcieport on bridges) stay bound.
HARMLESS_DRIVERS = frozenset({"pci-stub", "pcieport"})


def is_vfio_driver(driver: str | None) -> bool:
    return driver is not None and (driver == "vfio-pci" or driver.startswith("vfio"))


def blocks_vfio(dev: PciDevice) -> bool:
    """True when this member keeps its group from being viable for VFIO."""
    if dev.driver is None or is_vfio_driver(dev.driver):
        return False
    if dev.is_bridge:
        return dev.driver not in HARMLESS_DRIVERS
    return dev.driver != "pci-stub"


@dataclass(frozen=True)
class DeviceView:
    """A device as host-groups shows it: the PCI model plus what the host uses it for."""

    dev: PciDevice
    active: dict[str, InUse]  # netdev name -> why the host uses it

    def to_json(self) -> dict[str, Any]:
        data = self.dev.to_json()
        data["active"] = {name: str(why) for name, why in self.active.items()}
        return data


@dataclass(frozen=True)
class Group:
    number: int
    type: str | None  # DMA, DMA-FQ, identity (iommu=pt), blocked, or None on old kernels
    members: tuple[DeviceView, ...]

    @property
    def blockers(self) -> list[PciDevice]:
        return [m.dev for m in self.members if blocks_vfio(m.dev)]

    @property
    def viable(self) -> bool:
        return not self.blockers

    @property
    def multifunction(self) -> list[list[str]]:
        """Slots with more than one function in this group (the ports of one card)."""
        slots: dict[str, list[str]] = {}
        for m in self.members:
            if not m.dev.is_bridge:
                slots.setdefault(m.dev.slot, []).append(m.dev.bdf)
        return [bdfs for bdfs in slots.values() if len(bdfs) > 1]

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.number,
            "type": self.type,
            "viable": self.viable,
            "blockers": [{"bdf": d.bdf, "driver": d.driver} for d in self.blockers],
            "multifunction": self.multifunction,
            "devices": [m.to_json() for m in self.members],
        }


def device_views(root: HostRoot, devices: list[PciDevice]) -> list[DeviceView]:
    held = survey.reasons(root)
    views = []
    for d in devices:
        active = {}
        for n in d.netdevs:
            why = in_use(root, n.name, held)
            if why is not None:
                active[n.name] = why
        views.append(DeviceView(d, active))
    return views


def groups(root: HostRoot, views: list[DeviceView] | None = None) -> list[Group]:
    """Every IOMMU group, in numeric order; empty when the kernel has no IOMMU enabled."""
    if views is None:
        views = device_views(root, scan(root))
    by_bdf = {v.dev.bdf: v for v in views}
    out = []
    for name in sorted(root.listdir(GROUPS), key=lambda n: int(n) if is_digits(n) else -1):
        if not is_digits(name):
            continue
        members = tuple(by_bdf[b] for b in root.listdir(f"{GROUPS}/{name}/devices") if b in by_bdf)
        out.append(Group(int(name), root.read_optional(f"{GROUPS}/{name}/type"), members))
    return out


@dataclass(frozen=True)
class Selection:
    """What `host-groups` shows: the groups (and the devices in none) that hold the device asked for,
    or a device of the class asked for; `enabled`: whether the kernel has any IOMMU group at all."""

    enabled: bool
    groups: list[Group]
    ungrouped: list[DeviceView]


def select(root: HostRoot, bdf: str | None = None, base_class: int | None = None) -> Selection:
    """The groups holding `bdf` (an error when no such device) and a device of `base_class`; each
    filter left out when None."""
    only = find(root, bdf) if bdf is not None else None
    views = device_views(root, scan(root))
    found = groups(root, views)
    grouped = {m.dev.bdf for g in found for m in g.members}
    chosen, ungrouped = found, [v for v in views if v.dev.bdf not in grouped]
    if only is not None:
        chosen = [g for g in chosen if any(m.dev.bdf == only.bdf for m in g.members)]
        ungrouped = [v for v in ungrouped if v.dev.bdf == only.bdf]
    if base_class is not None:
        chosen = [g for g in chosen if any(m.dev.base_class == base_class for m in g.members)]
        ungrouped = [v for v in ungrouped if v.dev.base_class == base_class]
    return Selection(bool(found), chosen, ungrouped)
