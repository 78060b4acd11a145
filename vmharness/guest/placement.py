"""Where a guest goes on its host: the NUMA node of its NIC (or node 0), that node's CPUs for the
vCPUs (one each) and for QEMU's own threads, and whether that node has the hugepages it needs.
Read through HostRoot, so `--print-xml --host-root SNAPSHOT` places a guest on another machine."""

from __future__ import annotations

from vmharness.cpus import parse_cpulist
from vmharness.errors import HarnessError
from vmharness.guest.domain import Placement
from vmharness.host.inspect import hugepages, pci
from vmharness.system.root import HostRoot


def node_cpus(root: HostRoot, node: int | None, offline: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The node's CPUs (or the host's, without NUMA), less `offline`: those a host knob will take away
    before the guest boots (SMT off: `run --print-xml` plans as the run will, once it is off)."""
    path = f"{hugepages.NODES}/node{node}/cpulist"
    text = root.read_optional(path) if node is not None else None
    if not text:
        path = "/sys/devices/system/cpu/online"
        text = root.read_optional(path)
    if not text:
        raise HarnessError("cannot tell this host's CPUs (no /sys/devices/system/cpu/online)",
                           "is sysfs mounted? with --host-root, use a snapshot from host-snapshot")
    return tuple(c for c in parse_cpulist(text, path) if c not in offline)


def nic_node(root: HostRoot, bdfs: tuple[str, ...]) -> tuple[int | None, str]:
    """The node for the guest and why: the NICs' node, node 0 on a NUMA host, None without NUMA."""
    found = {n for n in (pci.find(root, b).numa_node for b in bdfs) if n is not None}
    if len(found) > 1:
        raise HarnessError(f"the devices {', '.join(bdfs)} sit on different NUMA nodes {sorted(found)}",
                           "pass through devices of one node, so the guest's memory and CPUs can be local")
    if found:
        node = found.pop()
        return node, f"node {node}, where {bdfs[0]} is"
    if root.is_dir(f"{hugepages.NODES}/node0"):
        return 0, "node 0 (no passed-through device tells another)"
    return None, "no NUMA information"


def place(root: HostRoot, bdfs: tuple[str, ...], vcpus: int, offline: tuple[int, ...] = ()) -> Placement:
    """vCPU i on the node's CPU i (the first CPU left to QEMU's threads when the node has a spare one);
    never on a CPU of `offline` (node_cpus)."""
    node, why = nic_node(root, bdfs)
    cpus = node_cpus(root, node, offline)
    if vcpus < 1:
        raise HarnessError(f"a guest needs at least one vCPU, not {vcpus}", "pass --vcpus 1 or more")
    if vcpus > len(cpus):
        raise HarnessError(
            f"{vcpus} vCPUs but {'node ' + str(node) if node is not None else 'this host'} has {len(cpus)} CPUs",
            f"pass --vcpus {len(cpus)} or fewer, so that each vCPU has a CPU of its own")
    if vcpus < len(cpus):
        emulator, vcpu_cpus = cpus[:1], cpus[1:vcpus + 1]
    else:
        emulator, vcpu_cpus = cpus, cpus
    return Placement(node, vcpu_cpus, emulator, why)


def check_hugepages(root: HostRoot, node: int | None, size_kib: int, memory_mib: int) -> None:
    """The guest's memory must fit in free hugepages of that size (on its node when there is one)."""
    need = -(-memory_mib * 1024 // size_kib)
    label = hugepages.size_label(size_kib)
    pools = [p for p in hugepages.per_node(root) if p.size_kib == size_kib and (node is None or p.node == node)]
    free = sum(p.free for p in pools)
    if free < need:
        where = f"node {node}" if node is not None else "this host"
        raise HarnessError(
            f"the guest needs {need} free {label} hugepages on {where}, there are {free}",
            f"reserve them: vmharness host-prepare --hugepages {memory_mib}M --hugepage-size {label}"
            + (f" --node {node}" if node is not None else "") + ", or give the guest less --memory")


def irq_cpus(node: tuple[int, ...], placed: Placement) -> tuple[tuple[int, ...], str]:
    """Where the host delivers the passed-through NIC's interrupts: the CPUs of its node (`node`) that
    hold no vCPU, and no QEMU emulator thread either when there are such CPUs. None: every CPU of
    the node runs a vCPU, and an interrupt anywhere there takes a vCPU's time (the why says so)."""
    free = tuple(c for c in node if c not in placed.vcpu_cpus)
    quiet = tuple(c for c in free if c not in placed.emulator_cpus)
    where = f"node {placed.node}" if placed.node is not None else "this host"
    if quiet:
        return quiet, f"the CPUs of {where} that hold no vCPU and no QEMU emulator thread"
    if free:
        return free, f"the CPUs of {where} that hold no vCPU (each also holds QEMU's emulator threads)"
    return (), f"every CPU of {where} holds a vCPU of the guest"
