"""The knobs, as a plan: for each one the value now, the value wanted (computed from the machine's
topology, tune/facts.py), and why, or the reason it is skipped on this machine (tune/plan.py). Nothing
here writes."""

from __future__ import annotations

import re

from vmharness.cpus import format_mask
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.model.profile import SEED_SYSCTLS, Profile
from vmharness.system import sysfs
from vmharness.tune.access import IRQBALANCE_PIDS, Prefetched, Target
from vmharness.tune.facts import Facts, Nic, facts, files_read, folders_listed
from vmharness.tune.plan import Plan, Skip

CLOCK, CPU, NET = sysfs.CLOCKSOURCE, sysfs.CPU, sysfs.NET
# Integer sysctls where more is more room: a profile's value is a floor, never lowered to.
FLOORS = {"net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog", "net.core.netdev_max_backlog", "fs.file-max",
          "fs.nr_open"}


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
    res = t.run(["sh", "-c", IRQBALANCE_PIDS], check=False)
    found = res.stdout.split()
    if res.returncode == 127:
        plan.skips.append(Skip("irqbalance", f"cannot tell: {res.stderr.strip()}"))
    elif not found:
        plan.skips.append(Skip("irqbalance", "not running"))
    else:
        plan.want("irqbalance", "service:irqbalance", "running", "stopped",
                  f"pid {found[0]}: it would move the pinned interrupts mid-run (seed 003's noise)")


def _first_reads(t: Target, p: Profile, ifaces: tuple[str, ...], is_host: bool) -> list[str]:
    """The files the plan reads whatever it finds (read in one batch): the rest depend on what these say."""
    paths = [f"{CPU}/possible", f"{CPU}/online", *(f"{NET}/{n}/ifindex" for n in ifaces),
             *("/proc/sys/" + name.replace(".", "/") for name in sorted(p.sysctl))]
    if ifaces:
        paths += ["/proc/interrupts", *(["/proc/sys/net/core/rps_sock_flow_entries"] if p.rfs is not None else [])]
    if p.clocksource != "keep":
        paths += [f"{CLOCK}/available_clocksource", f"{CLOCK}/current_clocksource"]
    if is_host:
        paths += [path for setting, path in ((p.thp, "/sys/kernel/mm/transparent_hugepage/enabled"),
                                             (p.ksm, "/sys/kernel/mm/ksm/run")) if setting != "keep"]
    return paths


def _second_reads(f: Facts, p: Profile) -> list[str]:
    """The files the plan reads once the machine's facts are known (a second batch)."""
    paths = [f"/proc/irq/{irq}/smp_affinity" for nic in f.nics for irqs in nic.queues.values() for irq in irqs
             if p.irq_affinity == "spread"]
    for nic in f.nics:
        paths += [f"{NET}/{nic.name}/queues/{q}/{name}" for q in nic.rx_queues
                  for name, wanted in (("rps_cpus", p.rps != "keep"), ("rps_flow_cnt", p.rfs is not None)) if wanted]
    if p.governor != "keep" and f.online:
        paths.append(f"{CPU}/cpu{f.online[0]}/cpufreq/scaling_governor")
    return paths


def make(t: Target, p: Profile, ifaces: tuple[str, ...], is_host: bool) -> Plan:
    """Every knob of the profile on this target: the changes, what is already so, what is skipped."""
    t = Prefetched(t, t.read_many(_first_reads(t, p, ifaces, is_host)), t.listdir_many(folders_listed(ifaces)))
    t.known.update(t.read_many(files_read(t.listed, ifaces)))  # what facts() reads: one round trip each
    f = facts(t, ifaces)
    t.known.update(t.read_many(_second_reads(f, p)))
    plan = Plan(t.label)
    missing = [n for n in ifaces if t.read(f"{NET}/{n}/ifindex") is None]
    if missing:
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
