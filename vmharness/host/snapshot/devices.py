"""The devices' part of a snapshot: what the inspection commands read of the PCI functions (their
attributes, drivers, VFs, MSI vectors and interrupts' CPUs), the network interfaces (their state, their
queues, and the links of their stack that the SSH guard follows), and the IOMMU (its groups, its units
and the firmware tables that announce it)."""

from __future__ import annotations

from vmharness.digits import is_digits
from vmharness.host.inspect.hostcheck.facts import ACPI_TABLES, FIRMWARE_IOMMU
from vmharness.host.inspect.iommu import GROUPS
from vmharness.host.inspect.pci import PCI_DEVICES
from vmharness.host.snapshot.writer import Writer

PCI_ATTRS = (
    "vendor", "device", "class", "subsystem_vendor", "subsystem_device", "revision", "numa_node",
    "local_cpulist", "driver_override", "reset_method", "sriov_numvfs", "sriov_totalvfs", "enable",
)
PCI_LINKS = ("driver", "iommu_group", "physfn")
NETDEV_ATTRS = ("operstate", "ifindex", "type", "flags", "mtu")
QUEUE_ATTRS = ("rps_cpus", "rps_flow_cnt", "xps_cpus")
IRQ_ATTRS = ("smp_affinity", "smp_affinity_list", "effective_affinity", "effective_affinity_list", "node")


def pci(w: Writer) -> None:
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


def _msi(w: Writer, dev: str) -> None:
    """A device's MSI vectors, and where each interrupt may run (tuning's queue->IRQ->CPU plan)."""
    w.files_in(f"{dev}/msi_irqs")
    for irq in w.root.listdir(f"{dev}/msi_irqs"):
        if is_digits(irq):
            for attr in IRQ_ATTRS:
                w.file(f"/proc/irq/{irq}/{attr}")


def net(w: Writer) -> None:
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


def _queues(w: Writer, target: str) -> None:
    for queue in w.root.listdir(f"{target}/queues"):
        w.dir(f"{target}/queues/{queue}")
        for attr in QUEUE_ATTRS:
            w.file(f"{target}/queues/{queue}/{attr}")


def _stack(w: Writer, target: str) -> None:
    """What the SSH guard reads of a netdev's stack (host/inspect/net/stack.py): its upper and lower links, a bridge's
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


def iommu(w: Writer) -> None:
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
