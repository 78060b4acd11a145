"""Build directory trees laid out like a host's `/` (sysfs with relative symlinks, procfs text) for
unit tests. The layout follows what the kernel writes; nothing here is read back by this module."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from pathlib import Path


def _le_hex(addr: str) -> str:
    value: int = struct.unpack("<I", socket.inet_aton(addr))[0]
    return f"{value:08X}"


class FakeHost:
    def __init__(
        self,
        base: Path,
        *,
        vendor: str = "GenuineIntel",
        flags: str = "fpu vme vmx pdpe1gb",
        cmdline: str = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt",
        acpi_tables: tuple[str, ...] = ("APIC", "DMAR"),
        iommu_units: tuple[str, ...] = ("dmar0",),
        nodes: int = 1,
        release: str = "6.1.0-test-amd64",
        interrupt_remapping: bool = True,
        node_mib: int = 16384,
        cpus_per_node: int = 1,
    ) -> None:
        self.base = base
        self.routes: list[str] = []
        self.local4: list[str] = []
        self.inet6: list[str] = []
        self.routes6: list[str] = []
        self.vlans: list[str] = []
        self.release = release
        self.write("proc/cpuinfo", "".join(
            f"processor\t: {i}\nvendor_id\t: {vendor}\nflags\t\t: {flags}\n\n" for i in range(2)))
        self.write("proc/cmdline", cmdline + "\n")
        self.write("proc/sys/kernel/osrelease", release + "\n")
        self.write("proc/modules", "e1000e 286720 0 - Live 0x0000000000000000\n")
        self.write("proc/meminfo", "MemTotal:       16384000 kB\nHugepagesize:       2048 kB\n")
        self.write("proc/mounts", "sysfs /sys sysfs rw 0 0\nproc /proc proc rw 0 0\n")
        self.chip = "IR-PCI-MSI" if interrupt_remapping else "PCI-MSI"
        self.irqs: dict[int, str] = {}
        self.interrupt(24, "eth0")
        self.write(f"lib/modules/{release}/modules.dep",
                   "kernel/drivers/vfio/pci/vfio-pci.ko.xz: kernel/drivers/vfio/vfio.ko.xz\n"
                   "kernel/drivers/vfio/vfio_iommu_type1.ko.xz: kernel/drivers/vfio/vfio.ko.xz\n")
        self.write(f"lib/modules/{release}/modules.builtin", "kernel/drivers/pci/pcieport.ko\n")
        for table in acpi_tables:
            self.write(f"sys/firmware/acpi/tables/{table}", table + "\0" * 40)
        self.mkdir("sys/class/iommu")
        self.mkdir("sys/kernel/iommu_groups")
        for unit in iommu_units:
            sub = "amd-iommu" if unit.startswith("ivhd") else "intel-iommu"
            self.write(f"sys/devices/virtual/iommu/{unit}/{sub}/cap", "d2008c40660462\n")
            self.link(f"sys/class/iommu/{unit}", f"sys/devices/virtual/iommu/{unit}")
        self.dev("/dev/kvm")
        for kib in (2048, 1048576):
            self.write(f"sys/kernel/mm/hugepages/hugepages-{kib}kB/nr_hugepages", "0\n")
            self.write(f"sys/kernel/mm/hugepages/hugepages-{kib}kB/free_hugepages", "0\n")
            for n in range(nodes):
                d = f"sys/devices/system/node/node{n}/hugepages/hugepages-{kib}kB"
                self.write(f"{d}/nr_hugepages", "0\n")
                self.write(f"{d}/free_hugepages", "0\n")
        k = cpus_per_node
        self.write("sys/devices/system/cpu/online", f"0-{nodes * k - 1}\n")
        for n in range(nodes):
            self.write(f"sys/devices/system/node/node{n}/cpulist", f"{n * k}-{n * k + k - 1}\n")
            self.write(f"sys/devices/system/node/node{n}/meminfo",
                       f"Node {n} MemTotal:  {node_mib * 1024} kB\nNode {n} MemFree:  {node_mib * 900} kB\n")
        self.mkdir("sys/bus/pci/devices")
        self.finish()

    # files -----------------------------------------------------------------------------------
    def p(self, rel: str) -> Path:
        return self.base / rel.lstrip("/")

    def write(self, rel: str, text: str) -> None:
        path = self.p(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def mkdir(self, rel: str) -> None:
        self.p(rel).mkdir(parents=True, exist_ok=True)

    def dev(self, rel: str) -> None:
        self.write(rel, "")

    def link(self, rel: str, target_rel: str) -> None:
        path = self.p(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()
        path.symlink_to(os.path.relpath(self.p(target_rel), path.parent))

    # interrupts ------------------------------------------------------------------------------
    def interrupt(self, number: int, name: str, cpus: str = "0-1") -> None:
        """An IRQ as /proc/interrupts lists it (counts per CPU, chip, hardware IRQ, two spaces, its
        handlers' names), and its /proc/irq/N/smp_affinity_list. A number already listed is freed
        and handed out again, as the kernel does."""
        self.irqs[number] = name
        self.write(f"proc/irq/{number}/smp_affinity_list", cpus + "\n")
        self._interrupts()

    def free_interrupt(self, number: int) -> None:
        """The IRQ is freed: gone from /proc/interrupts, and its /proc/irq/N with it."""
        del self.irqs[number]
        for f in self.p(f"proc/irq/{number}").iterdir():
            f.unlink()
        self.p(f"proc/irq/{number}").rmdir()
        self._interrupts()

    def _interrupts(self) -> None:
        lines = ["           CPU0       CPU1"]
        lines += [f"{n:4}:  10  0  {self.chip} {1048576 + n}-edge  {name}" for n, name in sorted(self.irqs.items())]
        lines += [" NMI:          0          0   Non-maskable interrupts",
                  " LOC:     123     456   Local timer interrupts"]
        self.write("proc/interrupts", "\n".join(lines) + "\n")

    # devices ---------------------------------------------------------------------------------
    def pci(
        self,
        bdf: str,
        vendor: int = 0x8086,
        device: int = 0x10D3,
        pci_class: int = 0x020000,
        *,
        driver: str | None = None,
        group: int | None = None,
        numa: int = -1,
        netdevs: tuple[str, ...] = (),
        parent: str | None = None,
        reset: str | None = "flr bus",
        virtio: bool = False,
        sriov: tuple[int, int] | None = None,
        physfn: str | None = None,
    ) -> str:
        """Add a PCI device; returns its sysfs directory (relative to the root)."""
        parent_dir = self.devdir(parent) if parent else f"sys/devices/pci{bdf[:7]}"
        d = f"{parent_dir}/{bdf}"
        self.write(f"{d}/vendor", f"0x{vendor:04x}\n")
        self.write(f"{d}/device", f"0x{device:04x}\n")
        self.write(f"{d}/class", f"0x{pci_class:06x}\n")
        self.write(f"{d}/numa_node", f"{numa}\n")
        self.write(f"{d}/driver_override", "(null)\n")
        if reset is not None:
            self.write(f"{d}/reset_method", reset + "\n")
        if sriov is not None:
            self.write(f"{d}/sriov_numvfs", f"{sriov[0]}\n")
            self.write(f"{d}/sriov_totalvfs", f"{sriov[1]}\n")
        if physfn is not None:
            self.link(f"{d}/physfn", self.devdir(physfn))
        self.link(f"sys/bus/pci/devices/{bdf}", d)
        if driver:
            self.mkdir(f"sys/bus/pci/drivers/{driver}")
            self.link(f"{d}/driver", f"sys/bus/pci/drivers/{driver}")
        if group is not None:
            g = f"sys/kernel/iommu_groups/{group}"
            self.write(f"{g}/type", "DMA\n")
            self.link(f"{d}/iommu_group", g)
            self.link(f"{g}/devices/{bdf}", d)
        for i, name in enumerate(netdevs):
            nd = f"{d}/virtio{i}/net/{name}" if virtio else f"{d}/net/{name}"
            self.write(f"{nd}/operstate", "up\n")
            self.link(f"sys/class/net/{name}", nd)
        return d

    def devdir(self, bdf: str) -> str:
        return os.path.relpath(os.path.realpath(self.p(f"sys/bus/pci/devices/{bdf}")), self.base)

    def virtual_netdev(self, name: str) -> None:
        d = f"sys/devices/virtual/net/{name}"
        self.write(f"{d}/operstate", "up\n")
        self.link(f"sys/class/net/{name}", d)

    def enslave(self, iface: str, master: str) -> None:
        """`<iface>/master` points at the master's directory, as the kernel's link does."""
        iface_dir = Path(os.path.realpath(self.p(f"sys/class/net/{iface}")))
        master_dir = os.path.realpath(self.p(f"sys/class/net/{master}"))
        (iface_dir / "master").symlink_to(os.path.relpath(master_dir, iface_dir))

    # stacked devices, linked as the kernel links them (netdev_adjacent: upper_X in the lower device,
    # lower_Y in the upper one, plus master for bridges, bonds and OVS ports) --------------------
    def _dir(self, iface: str) -> Path:
        return Path(os.path.realpath(self.p(f"sys/class/net/{iface}")))

    def _symlink(self, at: Path, target: Path) -> None:
        at.parent.mkdir(parents=True, exist_ok=True)
        at.symlink_to(os.path.relpath(target, at.parent))

    def stack(self, lower: str, upper: str, *, master: bool = False) -> None:
        """`upper` sits on `lower`: upper_<upper> in lower's directory, lower_<lower> in upper's."""
        low, up = self._dir(lower), self._dir(upper)
        self._symlink(low / f"upper_{upper}", up)
        self._symlink(up / f"lower_{lower}", low)
        if master:
            self._symlink(low / "master", up)

    def bridge(self, name: str, ports: tuple[str, ...]) -> None:
        """A Linux bridge: bridge/ and brif/PORT -> ../../PORT/brport, as in real sysfs."""
        self.virtual_netdev(name)
        self.mkdir(f"sys/devices/virtual/net/{name}/bridge")
        for port in ports:
            self.stack(port, name, master=True)
            (self._dir(port) / "brport").mkdir()
            self._symlink(self._dir(name) / "brif" / port, self._dir(port) / "brport")

    def bond(self, name: str, slaves: tuple[str, ...]) -> None:
        self.virtual_netdev(name)
        self.write(f"sys/devices/virtual/net/{name}/bonding/slaves", " ".join(slaves) + "\n")
        for slave in slaves:
            self.stack(slave, name, master=True)

    def vlan(self, lower: str, vid: int, name: str | None = None) -> str:
        """An 802.1Q device on `lower`, also listed in /proc/net/vlan/config; returns its name."""
        name = name or f"{lower}.{vid}"
        self.virtual_netdev(name)
        self.stack(lower, name)
        self.vlans.append(f"{name:<15}| {vid}  | {lower}")
        self.finish()
        return name

    def macvlan(self, lower: str, name: str) -> None:
        """A macvlan, macvtap or ipvlan device: upper and lower links only, no master."""
        self.virtual_netdev(name)
        self.stack(lower, name)

    def ovs(self, ports: tuple[str, ...], bridges: tuple[str, ...] = ("br-ex",)) -> None:
        """Open vSwitch: each port's master is the datapath device ovs-system; the bridges' own
        (internal) interfaces are virtual devices linked to nothing."""
        if not self.p("sys/class/net/ovs-system").exists():
            self.virtual_netdev("ovs-system")
        for port in ports:
            self.stack(port, "ovs-system", master=True)
        for b in bridges:
            self.virtual_netdev(b)

    # addresses and routes --------------------------------------------------------------------
    def route(self, iface: str, dest: str, mask: str, gateway: str = "0.0.0.0") -> None:
        flags = "0003" if gateway != "0.0.0.0" else "0001"
        self.routes.append(
            f"{iface}\t{_le_hex(dest)}\t{_le_hex(gateway)}\t{flags}\t0\t0\t0\t{_le_hex(mask)}\t0\t0\t0")
        self.finish()

    def address(self, iface: str, addr: str, prefix: int) -> None:
        """An IPv4 address with the prefix route the kernel adds for it."""
        net = ipaddress.ip_network(f"{addr}/{prefix}", strict=False)
        self.local4.append(addr)
        self.route(iface, str(net.network_address), str(net.netmask))

    def address6(self, iface: str, addr: str, scope: str = "00") -> None:
        hexaddr = ipaddress.IPv6Address(addr).exploded.replace(":", "")
        self.inet6.append(f"{hexaddr} 02 40 {scope} 80 {iface:>8}")
        self.finish()

    def route6(self, iface: str, dest: str, prefix: int, metric: int = 256) -> None:
        """An IPv6 route, as a line of /proc/net/ipv6_route."""
        hexdest = ipaddress.IPv6Address(dest).exploded.replace(":", "")
        zero = "0" * 32
        self.routes6.append(f"{hexdest} {prefix:02x} {zero} 00 {zero} {metric:08x} 00000001 00000000 00000001 "
                            f"{iface:>8}")
        self.finish()

    def mount(self, line: str) -> None:
        with open(self.p("proc/mounts"), "a") as f:
            f.write(line + "\n")

    def finish(self) -> None:
        header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
        self.write("proc/net/route", "\n".join([header, *self.routes]) + "\n")
        trie = ["Main:", "  +-- 0.0.0.0/0 3 0 5"]
        for a in self.local4:
            trie += [f"     |-- {a}", "        /32 host LOCAL"]
        self.write("proc/net/fib_trie", "\n".join(trie) + "\n")
        self.write("proc/net/if_inet6", "".join(line + "\n" for line in self.inet6))
        self.write("proc/net/ipv6_route", "".join(line + "\n" for line in self.routes6))
        if self.vlans:
            self.write("proc/net/vlan/config", "VLAN Dev name\t | VLAN ID\n"
                       "Name-Type: VLAN_NAME_TYPE_RAW_PLUS_VID_NO_PAD\n" + "".join(v + "\n" for v in self.vlans))
