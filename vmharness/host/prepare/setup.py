"""host-setup --print: the persistent form of host-prepare, for a researcher to install once and
reboot into. Built from the same plan logic (IOMMU vendor, the whole group, the same refusals), so it
never drifts from what host-prepare does at run time."""

from __future__ import annotations

from vmharness.errors import HarnessError
from vmharness.host.inspect.hostcheck.facts import gather
from vmharness.host.inspect.pci import PciDevice, find
from vmharness.host.prepare.plan import VFIO_DRIVER, Plan, Request, group_members, page_request, refuse_in_use
from vmharness.system.root import HostRoot

GRUB_FILE = "/etc/default/grub.d/vmharness.cfg"
MODPROBE_FILE = "/etc/modprobe.d/vmharness-vfio.conf"
UDEV_FILE = "/etc/udev/rules.d/60-vmharness-vfio.rules"


def driver_module(root: HostRoot, driver: str) -> str:
    """The module a PCI driver lives in (driver virtio-pci is module virtio_pci), for modprobe.d."""
    return root.readlink_name(f"/sys/bus/pci/drivers/{driver}/module") or driver.replace("-", "_")


def _cmdline(root: HostRoot, req: Request, named: list[PciDevice]) -> list[str]:
    facts = gather(root)
    args = ["intel_iommu=on", "iommu=pt"] if facts.vendor == "intel" else ["iommu=pt"]
    pages = page_request(root, req, named)
    if pages is not None:
        args += [f"hugepagesz={pages.label}", f"hugepages={pages.node}:{pages.needed}"]
    return args


def _devices(root: HostRoot, req: Request, named: list[PciDevice]) -> tuple[list[PciDevice], list[str]]:
    """The devices to pin to vfio-pci: whole groups where the IOMMU is on already."""
    notes: list[str] = []
    devices: list[PciDevice] = []
    for dev in named:
        if dev.is_bridge:
            raise HarnessError(f"{dev.bdf} is a {dev.class_name}, not an endpoint device",
                               "pass the NIC's own address")
        if dev.iommu_group is None:
            refuse_in_use(root, None, [dev], req, Plan())
            notes.append(f"{dev.bdf}: no IOMMU group yet (the IOMMU is off), so only this function is "
                         "listed; run host-setup --print again after the reboot to include its whole group")
            devices.append(dev)
            continue
        members = [m for m in group_members(root, dev.iommu_group) if not m.is_bridge]
        refuse_in_use(root, dev.iommu_group, members, req, Plan())
        devices += [m for m in members if m not in devices]
    return devices, notes


def render(root: HostRoot, req: Request) -> str:
    named = [find(root, b) for b in req.bdfs]
    args = _cmdline(root, req, named)
    devices, notes = _devices(root, req, named)
    out = [
        f"# {GRUB_FILE}: the kernel command line; then run update-grub and reboot",
        f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT {" ".join(args)}"',
    ]
    if any(a.startswith("hugepages=") for a in args):
        out.append("# hugepages=NODE:COUNT needs Linux 5.16 or later; older kernels take a total, split over nodes")
    if devices:
        drivers = sorted({driver_module(root, d.driver) for d in devices if d.driver and d.driver != VFIO_DRIVER})
        out += ["", f"# {MODPROBE_FILE}: vfio-pci loads before the NIC's driver, so it can claim the device first"]
        out += [f"softdep {drv} pre: vfio-pci" for drv in drivers] or ["# (no driver to order before)"]
        out += ["", f"# {UDEV_FILE}: these devices, and only these (no vendor:device ids, which would take",
                "# every card of the model), get driver_override before any driver probes them"]
        out += [f'ACTION=="add", SUBSYSTEM=="pci", KERNEL=="{d.bdf}", ATTR{{driver_override}}="{VFIO_DRIVER}"'
                for d in devices]
        out += ["# then: update-initramfs -u (the NIC's driver may load from the initramfs), and reboot"]
    out += [f"# note: {n}" for n in notes]
    return "\n".join(out)
