"""What a target's knobs are planned from, read from its /sys and /proc: its CPUs, its NUMA nodes, and
for each NIC named its node, its RX queues and its interrupt vectors, each told to serve a queue or
none by its label. Nothing here writes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from vmharness.cpus import parse_cpulist
from vmharness.digits import integer, is_digits
from vmharness.errors import HarnessError
from vmharness.host.prepare import irqs
from vmharness.system import sysfs
from vmharness.tune.access import Target

NET, NODES, CPU = sysfs.NET, sysfs.NODES, sysfs.CPU


@dataclass(frozen=True)
class Vector:
    """One MSI/MSI-X interrupt of a NIC, as /proc/interrupts names it."""

    irq: int
    label: str
    queue: int | None  # the queue its label numbers; None: a misc vector (link, mailbox, async events)


@dataclass(frozen=True)
class Nic:
    name: str
    node: int | None
    rx_queues: tuple[str, ...]
    vectors: tuple[Vector, ...] = ()  # in IRQ order

    @property
    def queues(self) -> dict[int, tuple[int, ...]]:
        """Queue number -> its vectors' IRQs (an RX and a TX vector, or one for both), by queue."""
        out: dict[int, list[int]] = {}
        for v in self.vectors:
            if v.queue is not None:
                out.setdefault(v.queue, []).append(v.irq)
        return {q: tuple(out[q]) for q in sorted(out)}

    @property
    def misc(self) -> tuple[Vector, ...]:
        return tuple(v for v in self.vectors if v.queue is None)


@dataclass(frozen=True)
class Facts:
    nr_cpus: int
    online: tuple[int, ...]
    nodes: dict[int, tuple[int, ...]]
    nics: tuple[Nic, ...]

    def node_cpus(self, node: int | None) -> tuple[int, ...]:
        """A node's CPUs; the online ones for a node that has none (memory only) or is unknown."""
        return self.nodes.get(node if node is not None else 0) or self.online

    def node_of(self, cpu: int) -> int | None:
        return next((n for n, cpus in self.nodes.items() if cpu in cpus), None)


# What drivers call the vectors that carry no queue: virtio's `virtio0-config`, mlx5's
# `mlx5_async0@pci:…` (older: `mlx5_cmd_eq`, `mlx5_pages_eq`), mlx4's `mlx4-async@…`, i40e's and
# ice's `…:misc`, iavf's `…:mbx`, vmxnet3's `eth0-event-N`, ena's and gve's `…-mgmnt@…`. e1000e,
# igb, igbvf and ixgbe name theirs after the interface alone (`eth0`: link state and "other" causes).
MISC_WORDS = frozenset({"config", "control", "ctrl", "async", "cmd", "pages", "aux", "misc", "mbx", "event",
                        "mgmnt", "mgmt", "other", "link", "lsc", "err", "eq"})
# A queue's vector ends in its number, after the queue's word or a separator: `eth0-rx-0`,
# `eth0-TxRx-3`, ena's `eth0-Tx-Rx-1`, `virtio0-input.2`, `mlx5_comp7`, `mlx4-1`, `gve-ntfy-blk0`.
_QUEUE = re.compile(r"(?:^|[-_.])(?:(?:tx-?rx|rx-?tx|rx|tx|input|output|comp|queue|blk|fp)[-_.]?)?([0-9]{1,5})$",
                    re.IGNORECASE)


def vector_queue(label: str, iface: str) -> int | None:
    """The queue a vector of `iface` serves, from its label; None for a misc vector. A shared
    `virtioN-virtqueues` vector carries every queue: it counts as queue 0's."""
    base = label.split("@", 1)[0]
    if base.startswith(iface) and base[len(iface):len(iface) + 1] in ("-", "_", "."):
        base = base[len(iface) + 1:]  # the interface's own name may hold a misc word or digits
    elif base == iface:
        return None
    words = {w.rstrip("0123456789") for w in re.split(r"[^a-z0-9]+", base.lower())}
    if words & MISC_WORDS:
        return None
    if base.endswith("-virtqueues"):
        return 0
    m = _QUEUE.search(base)
    return int(m.group(1)) if m else None


_NODE = re.compile(r"node[0-9]{1,4}")


def _numa_node_files(iface: str) -> tuple[str, str]:
    """Where a NIC's node is: its device's, else its parent's (a virtual function's, a bridge's)."""
    return f"{NET}/{iface}/device/numa_node", f"{NET}/{iface}/device/../numa_node"


def _msi_folders(iface: str) -> tuple[str, str]:
    return f"{NET}/{iface}/device/msi_irqs", f"{NET}/{iface}/device/../msi_irqs"


def folders_listed(ifaces: tuple[str, ...]) -> list[str]:
    """Every folder `facts` lists, for one batch (Target.listdir_many) ahead of it."""
    return [NODES, *(d for iface in ifaces for d in (f"{NET}/{iface}/queues", *_msi_folders(iface)))]


def files_read(listed: dict[str, list[str]], ifaces: tuple[str, ...]) -> list[str]:
    """The files `facts` reads beyond a plan's first batch, for one batch ahead of it once `folders_listed` are
    listed: each node's CPUs, each NIC's node (both places: the second is read only where the first says
    nothing, so one round trip holds both)."""
    return [*(f"{NODES}/{d}/cpulist" for d in listed.get(NODES, []) if _NODE.fullmatch(d)),
            *(f for iface in ifaces for f in _numa_node_files(iface))]


def _vectors(t: Target, iface: str) -> tuple[Vector, ...]:
    msi: list[str] = []
    for where in _msi_folders(iface):
        msi = t.listdir(where)
        if msi:
            break
    numbers = {int(n) for n in msi if is_digits(n)}
    listed = irqs.names(t.read("/proc/interrupts") or "")
    return tuple(Vector(n, listed[n], vector_queue(listed[n], iface)) for n in sorted(numbers & set(listed)))


def facts(t: Target, ifaces: tuple[str, ...]) -> Facts:
    possible, online = (parse_cpulist(t.read(f"{CPU}/{n}") or "0", f"{CPU}/{n}") for n in ("possible", "online"))
    if not possible or not online:
        raise HarnessError(f"{CPU}/{'online' if possible else 'possible'} lists no CPU", "the host root is damaged")
    nodes = {}
    for d in t.listdir(NODES):
        if _NODE.fullmatch(d):
            nodes[int(d[4:])] = parse_cpulist(t.read(f"{NODES}/{d}/cpulist") or "", f"{NODES}/{d}/cpulist")
    nics = []
    for iface in ifaces:
        own, parents = _numa_node_files(iface)
        node_text = t.read(own) or t.read(parents)
        node = integer(node_text or "", signed=True)
        node = node if node is not None and node >= 0 else None
        rx = tuple(sorted((q for q in t.listdir(f"{NET}/{iface}/queues") if q.startswith("rx-") and is_digits(q[3:])),
                          key=lambda q: int(q[3:])))  # the kernel's rx-N only: anything else is no queue
        nics.append(Nic(iface, node, rx, _vectors(t, iface)))
    return Facts(max(possible) + 1, online, nodes or {0: online}, tuple(nics))
