"""The libvirt domain XML, built as an element tree from a DomainSpec.

Why not `virt-install --print-xml`: it asks the local libvirtd for capabilities (so it needs one
running, on the machine that will host the guest), and it decides placement itself. Here the XML must
come out the same with no libvirtd at all and against a host snapshot, with pinning computed from that
host's topology, and it must be checkable element by element in unit tests. An element tree gives all
of that in one small function; every value in it comes from the spec, nothing from a template string.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from vmharness.model.bdf import parse_bdf

AGENT_CHANNEL = "org.qemu.guest_agent.0"
QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"  # libvirt's namespace for raw QEMU arguments
# QEMU's TCG translation cache is 1 GiB by default and fills as the guest runs new code. With the
# guest's memory bound to one NUMA node (numatune strict), QEMU's own memory is bound there too, and
# a cache that size got QEMU OOM-killed on a node of 1 GiB with the guest's hugepages in it. 256 MiB
# holds a guest kernel's and nginx's code many times over.
TCG_CACHE_MIB = 256
CAP_PERIOD_US = 100_000  # the CFS period of a capped vCPU (the kernel's default); 100 ms


def cap_quota(percent: int) -> int:
    """The CFS quota (µs per CAP_PERIOD_US) that holds a vCPU thread to `percent` of a CPU."""
    return CAP_PERIOD_US * percent // 100


@dataclass(frozen=True)
class Placement:
    """Where the guest runs on the host: one NUMA node (None: the host has no NUMA information), the
    host CPU of each vCPU, and the CPUs for QEMU's own threads."""

    node: int | None
    vcpu_cpus: tuple[int, ...]
    emulator_cpus: tuple[int, ...]
    why: str = ""


@dataclass(frozen=True)
class Link:
    """The management and benchmark link: a tap on the host, virtio-net in the guest."""

    tap: str
    mac: str


@dataclass(frozen=True)
class DomainSpec:
    name: str
    uuid: str
    kvm: bool
    memory_mib: int
    placement: Placement
    disk: str
    kernel: str
    cmdline: str
    console_log: str
    initrd: str | None = None
    hostdevs: tuple[str, ...] = ()
    managed: bool = False
    hugepage_kib: int | None = None
    link: Link | None = None
    cpu_features: tuple[str, ...] = ()  # "+name" required, "-name" hidden from the guest
    qemu_args: tuple[str, ...] = ()
    emulator: str | None = None  # the QEMU binary libvirt runs for it; None: the one libvirt finds
    vcpu_cap: int = 0  # percent of a host CPU each vCPU may use; 0: no cap
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def vcpus(self) -> int:
        return len(self.placement.vcpu_cpus)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def _cpuset(cpus: tuple[int, ...]) -> str:
    return ",".join(str(c) for c in cpus)


def _os(dom: ET.Element, spec: DomainSpec) -> None:
    os_el = _sub(dom, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="q35")
    _sub(os_el, "kernel", spec.kernel)
    if spec.initrd:
        _sub(os_el, "initrd", spec.initrd)
    _sub(os_el, "cmdline", spec.cmdline)
    features = _sub(dom, "features")
    _sub(features, "acpi")
    _sub(features, "apic")
    if not spec.kvm:
        _sub(_sub(features, "tcg"), "tb-cache", str(TCG_CACHE_MIB), unit="MiB")


def _cpu_and_memory(dom: ET.Element, spec: DomainSpec) -> None:
    _sub(dom, "memory", str(spec.memory_mib), unit="MiB")
    _sub(dom, "currentMemory", str(spec.memory_mib), unit="MiB")
    if spec.hugepage_kib:
        backing = _sub(dom, "memoryBacking")
        pages = _sub(backing, "hugepages")
        _sub(pages, "page", size=str(spec.hugepage_kib), unit="KiB", nodeset="0")
        _sub(backing, "locked")
    _sub(dom, "vcpu", str(spec.vcpus), placement="static")
    tune = _sub(dom, "cputune")
    for vcpu, host_cpu in enumerate(spec.placement.vcpu_cpus):
        _sub(tune, "vcpupin", vcpu=str(vcpu), cpuset=str(host_cpu))
    _sub(tune, "emulatorpin", cpuset=_cpuset(spec.placement.emulator_cpus))
    if spec.vcpu_cap:  # each vCPU thread may run `quota` µs of every `period`: a known slow-down
        _sub(tune, "period", str(CAP_PERIOD_US))
        _sub(tune, "quota", str(cap_quota(spec.vcpu_cap)))
    node = spec.placement.node
    if node is not None:  # the guest's one NUMA cell (below) lives on the host's node
        numatune = _sub(dom, "numatune")
        _sub(numatune, "memory", mode="strict", nodeset=str(node))
        _sub(numatune, "memnode", cellid="0", mode="strict", nodeset=str(node))
    # Without KVM, "maximum" is QEMU's `-cpu max`: every feature TCG can emulate.
    cpu = _sub(dom, "cpu", mode="host-passthrough" if spec.kvm else "maximum", check="none")
    for feature in spec.cpu_features:
        _sub(cpu, "feature", policy="require" if feature[0] == "+" else "disable", name=feature[1:])
    if node is not None or spec.hugepage_kib:
        numa = _sub(cpu, "numa")
        _sub(numa, "cell", id="0", cpus=f"0-{spec.vcpus - 1}", memory=str(spec.memory_mib), unit="MiB")


def _devices(dom: ET.Element, spec: DomainSpec) -> None:
    devices = _sub(dom, "devices")
    if spec.emulator:
        _sub(devices, "emulator", spec.emulator)
    disk = _sub(devices, "disk", type="file", device="disk")
    _sub(disk, "driver", name="qemu", type="qcow2", discard="unmap")
    _sub(disk, "source", file=spec.disk)
    _sub(disk, "target", dev="vda", bus="virtio")
    for bdf in spec.hostdevs:
        domain, bus, rest = parse_bdf(bdf).split(":")
        slot, function = rest.split(".")
        hostdev = _sub(devices, "hostdev", mode="subsystem", type="pci", managed="yes" if spec.managed else "no")
        source = _sub(hostdev, "source")
        _sub(source, "address", domain=f"0x{domain}", bus=f"0x{bus}", slot=f"0x{slot}", function=f"0x{function}")
    if spec.link is not None:
        iface = _sub(devices, "interface", type="ethernet")
        _sub(iface, "mac", address=spec.link.mac)
        _sub(iface, "target", dev=spec.link.tap, managed="yes")
        _sub(iface, "model", type="virtio")
    serial = _sub(devices, "serial", type="pty")
    _sub(serial, "log", file=spec.console_log, append="off")
    _sub(serial, "target", port="0")
    console = _sub(devices, "console", type="pty")
    _sub(console, "target", type="serial", port="0")
    channel = _sub(devices, "channel", type="unix")
    _sub(channel, "target", type="virtio", name=AGENT_CHANNEL)
    _sub(devices, "controller", type="usb", model="none")  # libvirt adds a USB controller unless told
    rng = _sub(devices, "rng", model="virtio")
    _sub(rng, "backend", "/dev/urandom", model="random")
    _sub(devices, "memballoon", model="none")


def to_xml(spec: DomainSpec) -> str:
    dom = ET.Element("domain", type="kvm" if spec.kvm else "qemu")
    _sub(dom, "name", spec.name)
    _sub(dom, "uuid", spec.uuid)
    if spec.metadata:
        meta = _sub(dom, "metadata")
        ET.register_namespace("vmharness", "https://vmharness.invalid/domain/1")
        holder = _sub(meta, "{https://vmharness.invalid/domain/1}instance")
        for key, value in sorted(spec.metadata.items()):
            holder.set(key, value)
    _cpu_and_memory(dom, spec)
    _os(dom, spec)
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")
    _devices(dom, spec)
    if spec.qemu_args:
        ET.register_namespace("qemu", QEMU_NS)
        line = _sub(dom, f"{{{QEMU_NS}}}commandline")
        for arg in spec.qemu_args:
            _sub(line, f"{{{QEMU_NS}}}arg", value=arg)
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode") + "\n"
