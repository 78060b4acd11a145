"""The knobs, as a plan: for each one the value now, the value wanted (computed from the machine's
topology), and why, or the reason it is skipped on this machine. Nothing here writes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vmharness.cpus import format_mask, parse_cpulist, parse_mask
from vmharness.digits import integer, is_digits
from vmharness.errors import HarnessError
from vmharness.host.prepare import irqs
from vmharness.model.profile import SEED_SYSCTLS, Profile
from vmharness.tune.access import Target

NET = "/sys/class/net"
NODES = "/sys/devices/system/node"
CPU = "/sys/devices/system/cpu"
CLOCK = "/sys/devices/system/clocksource/clocksource0"
# Integer sysctls where more is more room: a profile's value is a floor, never lowered to.
FLOORS = {"net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog", "net.core.netdev_max_backlog", "fs.file-max",
          "fs.nr_open"}


@dataclass(frozen=True)
class Change:
    knob: str
    path: str  # a file; or `ethtool:IFACE:SETTING`; or `service:NAME`
    before: str
    after: str
    why: str

    def to_json(self) -> dict[str, str]:
        return {"knob": self.knob, "path": self.path, "before": self.before, "after": self.after, "why": self.why}


@dataclass(frozen=True)
class Skip:
    knob: str
    why: str


@dataclass
class Plan:
    target: str
    changes: list[Change] = field(default_factory=list)
    kept: list[Change] = field(default_factory=list)  # already at the wanted value
    skips: list[Skip] = field(default_factory=list)

    def want(self, knob: str, path: str, before: str | None, after: str, why: str) -> None:
        if before is not None:
            before = " ".join(before.split())  # one line, single spaces (port ranges come tab-separated)
        if before is None:
            self.skips.append(Skip(knob, f"{path} does not exist here"))
        elif same(before, after, knob):
            self.kept.append(Change(knob, path, before, after, why))
        else:
            self.changes.append(Change(knob, path, before, after, why))

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "changes": [c.to_json() for c in self.changes],
                "kept": [c.to_json() for c in self.kept], "skipped": [{"knob": s.knob, "why": s.why}
                                                                     for s in self.skips]}


MASK_KNOBS = ("rps", "irq_affinity")


def same(a: str, b: str, knob: str = "") -> bool:
    """Equal as the kernel means them: masks by their CPUs, numbers and lists by their words."""
    if knob in MASK_KNOBS:
        return parse_mask(a) == parse_mask(b)
    return a.split() == b.split()


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


def _vectors(t: Target, iface: str) -> tuple[Vector, ...]:
    msi: list[str] = []
    for where in (f"{NET}/{iface}/device/msi_irqs", f"{NET}/{iface}/device/../msi_irqs"):
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
        if re.fullmatch(r"node[0-9]{1,4}", d):
            nodes[int(d[4:])] = parse_cpulist(t.read(f"{NODES}/{d}/cpulist") or "", f"{NODES}/{d}/cpulist")
    nics = []
    for iface in ifaces:
        node_text = t.read(f"{NET}/{iface}/device/numa_node") or t.read(f"{NET}/{iface}/device/../numa_node")
        node = integer(node_text or "", signed=True)
        node = node if node is not None and node >= 0 else None
        rx = tuple(sorted((q for q in t.listdir(f"{NET}/{iface}/queues") if q.startswith("rx-") and is_digits(q[3:])),
                          key=lambda q: int(q[3:])))  # the kernel's rx-N only: anything else is no queue
        nics.append(Nic(iface, node, rx, _vectors(t, iface)))
    return Facts(max(possible) + 1, online, nodes or {0: online}, tuple(nics))


def _queue_cpus(f: Facts, nic: Nic) -> dict[int, int]:
    """The i-th queue's vectors (its RX and TX ones, or its one for both) on CPU i of the NIC's node
    (wrapping round): a queue's interrupts and its packets' processing stay on one CPU."""
    cpus = f.node_cpus(nic.node)
    return {q: cpus[i % len(cpus)] for i, q in enumerate(nic.queues)}


def _rps_mask(f: Facts, rule: str, irq_cpu: int | None, nic: Nic) -> set[int] | None:
    node = f.node_of(irq_cpu) if irq_cpu is not None else nic.node
    local = set(f.node_cpus(node))
    if rule == "off":
        return set()
    if rule == "all":
        return set(f.online)
    if rule == "node":
        return local
    if rule == "node-except-irq":
        return local - {irq_cpu} if irq_cpu is not None else local
    return None


def _network(t: Target, f: Facts, p: Profile, plan: Plan) -> None:
    for nic in f.nics:
        queue_cpu = _queue_cpus(f, nic)
        if p.irq_affinity == "spread":
            if not nic.queues:
                plan.skips.append(Skip("irq_affinity", f"{nic.name}: no MSI queue interrupts found (a virtual NIC "
                                                       "without them, or no /proc/interrupts)"))
            for queue, cpu in queue_cpu.items():
                for irq in nic.queues[queue]:
                    plan.want("irq_affinity", f"/proc/irq/{irq}/smp_affinity",
                              t.read(f"/proc/irq/{irq}/smp_affinity"), format_mask({cpu}, f.nr_cpus),
                              f"{nic.name} queue {queue}'s interrupt {irq} on CPU {cpu} alone "
                              "(seed 000: pin the NIC's interrupts yourself instead of guessing)")
            if nic.misc:
                misc = ", ".join(f"{v.label} (IRQ {v.irq})" for v in nic.misc)
                plan.skips.append(Skip("irq_affinity", f"{nic.name}: left where they are, serving no queue: {misc}"))
        # the i-th RX queue is served by the i-th queue's vectors
        irq_of_queue = dict(zip(nic.rx_queues, queue_cpu.values(), strict=False))
        if p.rps != "keep":
            for q in nic.rx_queues:
                cpus = _rps_mask(f, p.rps, irq_of_queue.get(q), nic)
                if cpus is not None and not cpus and p.rps != "off":
                    plan.skips.append(Skip("rps", f"{nic.name} {q}: its node has no CPU besides the interrupt's"))
                    continue
                assert cpus is not None
                path = f"{NET}/{nic.name}/queues/{q}/rps_cpus"
                plan.want("rps", path, t.read(path), format_mask(cpus, f.nr_cpus),
                          f"{p.rps}: the interrupt CPU's node without the interrupt CPU itself (seed 000's best)"
                          if p.rps == "node-except-irq" else f"RPS over {p.rps}")
        if p.rfs is not None and nic.rx_queues:
            per_queue = p.rfs // len(nic.rx_queues)
            for q in nic.rx_queues:
                plan.want("rfs", f"{NET}/{nic.name}/queues/{q}/rps_flow_cnt",
                          t.read(f"{NET}/{nic.name}/queues/{q}/rps_flow_cnt"), str(per_queue),
                          f"RFS: {p.rfs} flows / {len(nic.rx_queues)} queues (seed 003: they sum to the global table)")
    if p.rfs is not None and f.nics:
        path = "/proc/sys/net/core/rps_sock_flow_entries"
        plan.want("rfs", path, t.read(path), str(p.rfs), "RFS's global flow table (seed 003)")


def _ethtool(t: Target, f: Facts, p: Profile, plan: Plan) -> None:
    if p.coalescing == "keep" and not p.channels:
        return
    probe = t.run(["sh", "-c", "command -v ethtool"], check=False) if f.nics else None
    if probe is not None and not probe.ok:
        why = probe.stderr.strip() if probe.returncode == 127 and probe.stderr else "ethtool is not installed here"
        plan.skips.append(Skip("coalescing", why))
        return
    for nic in f.nics:
        res = t.run(["ethtool", "-c", nic.name], check=False)
        if p.coalescing == "adaptive":
            m = re.search(r"Adaptive RX:\s*(\S+)", res.stdout)
            if not res.ok or m is None or m.group(1) == "n/a":
                plan.skips.append(Skip("coalescing", f"{nic.name}: its driver has no adaptive interrupt coalescing"
                                       + ("" if res.ok else " (ethtool -c failed)")))
            else:
                plan.want("coalescing", f"ethtool:{nic.name}:adaptive-rx", m.group(1), "on",
                          "adaptive RX coalescing: fewer interrupts at high rates, low latency at low ones")
        if p.channels:
            res = t.run(["ethtool", "-l", nic.name], check=False)
            now = re.findall(r"Combined:[ \t]*([0-9]{1,9})", res.stdout)
            if not res.ok or len(now) < 2:
                plan.skips.append(Skip("channels", f"{nic.name}: no combined queues to set (ethtool -l)"))
            else:
                plan.want("channels", f"ethtool:{nic.name}:combined", now[1], str(min(p.channels, int(now[0]))),
                          f"{p.channels} queues asked (at most {now[0]})")


def _sysctls(t: Target, p: Profile, plan: Plan) -> None:
    for name, value in sorted(p.sysctl.items()):
        path = "/proc/sys/" + name.replace(".", "/")
        before = t.read(path)
        wanted = str(value)
        if name in FLOORS and before is not None and is_digits(before.strip()) and int(before) >= int(value):
            wanted = before.strip()
        source = ""
        if SEED_SYSCTLS.get(name) == value and name != "fs.file-max":
            source = " (seed 002)" if name == "net.ipv4.tcp_tw_reuse" else " (seed 004)"
        plan.want("sysctl", path, before, wanted, f"{name} {'at least ' if name in FLOORS else ''}{value}{source}")


def _cpu(t: Target, f: Facts, p: Profile, plan: Plan) -> None:
    if p.clocksource != "keep":
        available = (t.read(f"{CLOCK}/available_clocksource") or "").split()
        if p.clocksource not in available:
            plan.skips.append(Skip("clocksource", f"{p.clocksource} is not available here ({' '.join(available)})"))
        else:
            plan.want("clocksource", f"{CLOCK}/current_clocksource", t.read(f"{CLOCK}/current_clocksource"),
                      p.clocksource, "seed 000: time-of-day reads showed up in profiles until tsc")
    if p.governor != "keep":
        govs = [f"{CPU}/cpu{c}/cpufreq/scaling_governor" for c in f.online]
        if t.read(govs[0]) is None:
            plan.skips.append(Skip("governor", "no cpufreq here (a VM, or a driver without governors)"))
        else:
            for path in govs:
                plan.want("governor", path, t.read(path), p.governor, "a fixed clock: no frequency ramps mid-run")


def _host_side(t: Target, p: Profile, plan: Plan, is_host: bool) -> None:
    for knob, setting, path, wanted in (("thp", p.thp, "/sys/kernel/mm/transparent_hugepage/enabled", p.thp),
                                        ("ksm", p.ksm, "/sys/kernel/mm/ksm/run", "0")):
        if setting == "keep":
            continue
        if not is_host:
            plan.skips.append(Skip(knob, "a host-side knob (for the machine that runs the guests)"))
            continue
        before = t.read(path)
        if before is not None and knob == "thp":
            before = re.search(r"\[(\w+)\]", before).group(1) if "[" in before else before  # type: ignore[union-attr]
        why = ("guest memory on explicit hugepages; THP's khugepaged only adds noise" if knob == "thp"
               else "KSM merging guest pages costs CPU and changes memory behind the guest's back")
        plan.want(knob, path, before, wanted, why)


def _irqbalance(t: Target, p: Profile, plan: Plan) -> None:
    if p.irqbalance != "stop":
        return
    res = t.run(["sh", "-c", "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = irqbalance ] "
                             "&& echo ${p#/proc/}; done"], check=False)
    found = res.stdout.split()
    if res.returncode == 127:
        plan.skips.append(Skip("irqbalance", f"cannot tell: {res.stderr.strip()}"))
    elif not found:
        plan.skips.append(Skip("irqbalance", "not running"))
    else:
        plan.want("irqbalance", "service:irqbalance", "running", "stopped",
                  f"pid {found[0]}: it would move the pinned interrupts mid-run (seed 003's noise)")


def make(t: Target, p: Profile, ifaces: tuple[str, ...], is_host: bool) -> Plan:
    """Every knob of the profile on this target: the changes, what is already so, what is skipped."""
    f = facts(t, ifaces)
    plan = Plan(t.label)
    missing = [n for n in ifaces if t.read(f"{NET}/{n}/ifindex") is None]
    if missing:
        from vmharness.errors import HarnessError

        raise HarnessError(f"{t.label} has no interface {missing[0]}", f"its interfaces: {', '.join(t.listdir(NET))}")
    _irqbalance(t, p, plan)
    if not ifaces and (p.irq_affinity, p.rps, p.rfs, p.coalescing) != ("keep", "keep", None, "keep"):
        plan.skips.append(Skip("nic", "no network interface backed by a device here: no IRQ, RPS, RFS or "
                                      "coalescing knobs (name one with --iface)"))
    _network(t, f, p, plan)
    _ethtool(t, f, p, plan)
    _sysctls(t, p, plan)
    _cpu(t, f, p, plan)
    _host_side(t, p, plan, is_host)
    return plan
