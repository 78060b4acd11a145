"""Damaged host trees: realistic trees laid out like `/` (the seeds), the damages a tree copied by hand,
unpacked on another filesystem or made by a hostile colleague can hold, and a fingerprint of a tree to
prove that nothing was written into it. tests/unit/test_damaged_trees.py (hypothesis) and
tests/unit/test_hostile_trees.py (a table) use them.

A damage is applied at a host path ("/sys/class/net/eth0") only where the folder holding it resolves
inside the tree: one damage may turn a folder into a link that leads out of the tree (to `/etc`), and
another one through that link must never touch the real host. Device nodes carry the numbers of
/dev/null and /dev/zero, or of a RAM disk minor that no kernel makes by default: never a real disk.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from tests.fakehost import FakeHost
from vmharness.experiment import ops
from vmharness.journal import journal
from vmharness.system.root import LARGE_READ, HostRoot
from vmharness.userfile import MAX_READ

NIC = "0000:b3:00.0"
NIC_DIR = f"sys/devices/pci0000:00/0000:00:1c.0/{NIC}"
ESCAPES = ("/etc/hostname", "/dev/zero", "/", "../../../../../../../../../../etc")  # link targets out of the tree
HUGE = (MAX_READ + 1, 5 << 20, LARGE_READ + 1)  # sparse sizes: over the cap, several MiB, over the large cap
DEVICES = {"null": (stat.S_IFCHR, 1, 3), "zero": (stat.S_IFCHR, 1, 5), "ram": (stat.S_IFBLK, 1, 250)}
# text a careless edit or another kernel may leave in an attribute, and JSON of the wrong shape (the
# probes and the journal are JSON)
TEXTS = ("-1\n", "x\n", "0x\n", "99999999999999999999999999\n", "-\n", " \n", "nan\n", "4294967296\n", "1 2\n",
         "0-99999\n", "3-1\n", "\x1b[31m\n", "../../../etc\n", "a\tb\tc\n", ":\n")
JSONS = ("[1]", "{}", "null", '"x"', "[" * 5000 + "]" * 5000, '{"kvm": 1, "qemu": []}', '{"libvirt": {"daemon": 1}}',
         '{"seq": 1, "op": "bind"}\n', '{"seq": 1, "op": "released", "seqs": 4}\n',
         '{"seq": 1, "op": "tune", "target": 1, "knob": 1, "path": 1, "before": 1, "after": 1, "owner": "tune"}\n')
KINDS = ("loop", "self-loop", "parent-loop", "fifo", "device", "garbage", "text", "json", "huge", "empty", "missing",
         "file-for-dir", "dir-for-file", "no-permission", "dangling", "escaping")


@dataclass(frozen=True)
class Damage:
    kind: str  # one of KINDS
    path: str  # the host path it is applied at
    arg: str | int | bytes = ""  # the device (DEVICES), size (huge), bytes (garbage), text, link target (escaping)

    def __str__(self) -> str:
        return f"{self.kind} at {self.path}" + (f" ({str(self.arg)[:60]!r})" if self.arg != "" else "")


# seeds ----------------------------------------------------------------------------------------------
def rich_host(base: Path) -> str:
    """An Intel host of two NUMA nodes: a two-port NIC behind a PCIe bridge in IOMMU group 40 on node 1
    (one port on vfio-pci already), the host's own NIC in group 1 carrying its routes and a VLAN, a
    virtio NIC in no group under a bond under a bridge, a disk controller a running domain holds;
    hugepages, modules, a journal host-prepare wrote, probes, and all a tuning plan reads. Returns the
    NIC to pass through."""
    h = FakeHost(base, nodes=2, cpus_per_node=2, node_mib=2048)
    h.pci("0000:00:1c.0", 0x8086, 0xA110, 0x060400, driver="pcieport", group=7)
    h.pci(NIC, 0x15B3, 0x1019, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f0",), parent="0000:00:1c.0",
          sriov=(0, 8))
    h.pci("0000:b3:00.1", 0x15B3, 0x1019, driver="vfio-pci", group=40, numa=1, parent="0000:00:1c.0")
    h.pci("0000:00:02.0", 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
    h.pci("0000:00:03.0", 0x1AF4, 0x1041, driver="virtio-pci", netdevs=("eth1",), virtio=True)
    h.pci("0000:00:1f.2", 0x8086, 0x2922, 0x010601, driver="ahci", group=9, numa=0)
    h.bond("bond0", ("eth1",))
    h.bridge("br0", ("bond0",))
    h.vlan("eth0", 100)
    h.address("eth0", "192.0.2.10", 24)
    h.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    h.address6("eth0", "2001:db8::10")
    h.route6("eth0", "2001:db8::", 64)
    h.interrupt(30, "vfio-msix[0](0000:b3:00.1)", "2-3")
    _tunable(h)
    h.write("proc/modules", "vfio_pci 16384 0 - Live 0x0\nvfio 45056 1 vfio_pci, Live 0x0\nkvm_intel 380928 0 - "
            "Live 0x0\nkvm 1142784 1 kvm_intel, Live 0x0\nmlx5_core 2097152 0 - Live 0x0\n")
    for mod, params in (("vfio", {"enable_unsafe_noiommu_mode": "N"}), ("kvm_intel", {"nested": "Y", "ept": "Y"}),
                        ("kvm", {"halt_poll_ns": "200000"})):
        h.write(f"sys/module/{mod}/initstate", "live\n")
        for name, value in params.items():
            h.write(f"sys/module/{mod}/parameters/{name}", value + "\n")
    h.mount("hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0")
    h.write("sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "512\n")
    h.write("sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages", "512\n")
    h.mkdir("dev/vfio")
    h.dev("dev/vfio/vfio")
    h.write("run/libvirt/qemu/other.xml", "<domstatus><domain type='kvm'><name>other</name><devices><hostdev "
            "mode='subsystem' type='pci'><source><address domain='0x0000' bus='0x00' slot='0x1f' function='0x2'/>"
            "</source></hostdev></devices></domain></domstatus>\n")
    daemon = {"pid": 812, "name": "libvirtd", "started": 1.0, "argv": ["libvirtd", "-d"], "unit": None}
    h.write("vmharness-probes.json", json.dumps({
        "kvm": {"usable": True, "detail": "the probe guest ran"}, "libvirtd": {"reachable": True, "detail": "up"},
        "qemu": {"path": "/usr/bin/qemu-system-x86_64", "version": "7.2.0"},
        "ssh_connection": "192.0.2.9 5 192.0.2.10 22",
        "hugeadm": {"installed": True, "pool_list": "      Size  Minimum  Current  Maximum  Default\n"
                    "   2097152      512      512      512        *\n"},
        "libvirt": {"daemon": daemon, "conf": {"paths": None, "mtime": 0}, "mounts": {"/dev/hugepages": [0.5, True]}},
    }))
    writer = HostRoot(base, allow_writes=True)
    assert {"bind", "pages"} <= set(journal.OPS), ops.REGISTRARS  # registered by host/prepare/bind.py, pages.py
    journal.record(writer, {"op": "bind", "bdf": "0000:b3:00.1", "driver": "mlx5_core", "override": None,
                            "netdevs": [], "named": True}, "host-prepare")
    journal.record(writer, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0}, "host-prepare")
    return NIC


def _tunable(h: FakeHost) -> None:
    """ens1f0's queues and MSI vectors with their affinities, the sysctls, THP, KSM, the clocksource and
    the governors that a tuning plan reads."""
    h.link(f"{NIC_DIR}/net/ens1f0/device", NIC_DIR)
    h.write(f"{NIC_DIR}/uevent", f"DRIVER=mlx5_core\nPCI_SLOT_NAME={NIC}\n")
    h.write(f"{NIC_DIR}/net/ens1f0/ifindex", "4\n")
    for q in ("rx-0", "rx-1"):
        h.write(f"{NIC_DIR}/net/ens1f0/queues/{q}/rps_cpus", "0\n")
        h.write(f"{NIC_DIR}/net/ens1f0/queues/{q}/rps_flow_cnt", "0\n")
    h.write(f"{NIC_DIR}/net/ens1f0/queues/tx-0/xps_cpus", "0\n")
    lines = ["           CPU0       CPU1       CPU2       CPU3"]
    for irq, label in ((40, f"mlx5_async0@pci:{NIC}"), (41, f"mlx5_comp0@pci:{NIC}"), (42, f"mlx5_comp1@pci:{NIC}")):
        h.write(f"{NIC_DIR}/msi_irqs/{irq}", "msix\n")
        h.write(f"proc/irq/{irq}/smp_affinity", "f\n")
        h.write(f"proc/irq/{irq}/smp_affinity_list", "0-3\n")
        lines.append(f" {irq}:  10  0  0  0  IR-PCI-MSIX-{NIC} {irq}-edge  {label}")
    lines.append("  30:  0  0  0  0  IR-PCI-MSIX-0000:b3:00.1 0-edge  vfio-msix[0](0000:b3:00.1)")
    h.write("proc/interrupts", "\n".join(lines) + "\n")
    for name, value in {"net/core/somaxconn": "4096", "net/core/netdev_max_backlog": "1000",
                        "net/core/rps_sock_flow_entries": "0", "net/ipv4/tcp_max_syn_backlog": "512",
                        "net/ipv4/ip_local_port_range": "32768\t60999", "net/ipv4/tcp_tw_reuse": "2",
                        "fs/file-max": "9223372036854775807", "vm/swappiness": "60"}.items():
        h.write(f"proc/sys/{name}", value + "\n")
    h.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    h.write("sys/kernel/mm/ksm/run", "1\n")
    clock = "sys/devices/system/clocksource/clocksource0"
    h.write(f"{clock}/available_clocksource", "tsc hpet acpi_pm\n")
    h.write(f"{clock}/current_clocksource", "hpet\n")
    h.write("sys/devices/system/cpu/possible", "0-3\n")
    for cpu in range(4):
        h.write(f"sys/devices/system/cpu/cpufreq/policy{cpu}/scaling_governor", "powersave\n")
        h.write(f"sys/devices/system/cpu/cpufreq/policy{cpu}/scaling_available_governors", "performance powersave\n")
        h.link(f"sys/devices/system/cpu/cpu{cpu}/cpufreq", f"sys/devices/system/cpu/cpufreq/policy{cpu}")


def plain_host(base: Path) -> str:
    """An AMD guest-like host: no IOMMU, one node, virtio devices, no journal and no probes."""
    h = FakeHost(base, vendor="AuthenticAMD", flags="fpu svm", cmdline="root=/dev/vda console=ttyS0",
                 acpi_tables=("APIC",), iommu_units=(), cpus_per_node=2)
    h.pci("0000:00:03.0", 0x1AF4, 0x1041, driver="virtio-pci", netdevs=("eth0",), virtio=True)
    h.pci("0000:00:04.0", 0x1AF4, 0x1042, 0x010000, driver="virtio-pci")
    h.virtual_netdev("lo")
    h.address("eth0", "192.0.2.2", 24)
    h.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    return "0000:00:03.0"


# damages --------------------------------------------------------------------------------------------
def _inside(tree: Path, path: str) -> bool:
    return path == str(tree) or path.startswith(str(tree) + "/")


def _spot(tree: Path, host_path: str) -> Path | None:
    """Where a damage at host_path goes: its folder resolved (made if missing), None if that folder
    leads out of the tree or cannot be made (a loop on the way)."""
    rel = host_path.strip("/")
    if not rel:
        return None
    parent = os.path.realpath(tree / os.path.dirname(rel))
    if not _inside(tree, parent):
        return None
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError:
        return None
    if not os.path.isdir(parent) or not _inside(tree, os.path.realpath(parent)):
        return None
    return Path(parent) / os.path.basename(rel)


def _clear(at: Path) -> bytes:
    """Remove what is at `at` (never following a link); returns a regular file's first bytes."""
    head = b""
    if at.is_symlink() or (os.path.lexists(at) and not at.is_dir()):
        if stat.S_ISREG(os.lstat(at).st_mode):
            with open(at, "rb") as f:
                head = f.read(4096)
        at.unlink()
    elif at.is_dir():
        shutil.rmtree(at)
    return head


def apply(tree: Path, d: Damage) -> bool:
    """Damage the tree at d.path; False if that spot is out of reach (see _spot)."""
    at = _spot(tree, d.path)
    if at is None:
        return False
    if d.kind == "no-permission":  # the thing itself keeps its content, the link its target
        real = os.path.realpath(at)
        if not os.path.lexists(real) or not _inside(tree, real) or real == str(tree):
            return False
        os.chmod(real, 0)
        return True
    head = _clear(at)
    if d.kind == "loop":
        partner = at.with_name(at.name + "~loop")
        if os.path.lexists(partner):  # the same loop drawn twice
            _clear(partner)
        os.symlink(partner.name, at)
        os.symlink(at.name, partner)
    elif d.kind == "self-loop":
        os.symlink(at.name, at)
    elif d.kind == "parent-loop":
        os.symlink("..", at)
    elif d.kind == "fifo":
        os.mkfifo(at)
    elif d.kind == "device":
        kind, major, minor = DEVICES[str(d.arg)]
        os.mknod(at, kind | 0o644, os.makedev(major, minor))
    elif d.kind == "garbage":
        at.write_bytes(bytes(d.arg) if isinstance(d.arg, bytes) else b"\xff\x00")
    elif d.kind in ("text", "json"):
        at.write_text(str(d.arg))
    elif d.kind == "huge":
        with open(at, "wb") as f:
            f.write(head)
            f.truncate(int(d.arg))
    elif d.kind in ("empty", "file-for-dir"):
        at.write_bytes(b"" if d.kind == "empty" else b"x\n")
    elif d.kind == "dir-for-file":
        at.mkdir()
    elif d.kind == "dangling":
        os.symlink(at.name + "~gone", at)
    elif d.kind == "escaping":
        os.symlink(str(d.arg), at)
    elif d.kind != "missing":
        raise ValueError(f"unknown damage {d.kind}")
    return True


# fingerprints ---------------------------------------------------------------------------------------
def fingerprint(tree: Path) -> dict[str, tuple[object, ...]]:
    """Every entry below `tree`, links not followed: its type, mode, size, times of change, device
    numbers, and a link's target. A write, a new or removed entry, a chmod all change it; a read does not."""
    out: dict[str, tuple[object, ...]] = {}
    todo = [tree]
    while todo:
        folder = todo.pop()
        with os.scandir(folder) as entries:
            for e in entries:
                st = e.stat(follow_symlinks=False)
                link = os.readlink(e.path) if e.is_symlink() else None
                out[os.path.relpath(e.path, tree)] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                                      st.st_rdev, st.st_nlink, link)
                if e.is_dir(follow_symlinks=False):
                    todo.append(Path(e.path))
    return out


def outside_fingerprint() -> dict[str, tuple[object, ...]]:
    """The real files an escaping link may point at."""
    out: dict[str, tuple[object, ...]] = {}
    for name in ESCAPES:
        if name.startswith("/") and name != "/":
            st = os.lstat(name)
            out[name] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return out
