"""A point's `samples` figures: what one machine did over a load's window, from the snapshots of its
sampler stream (rundir/samples.py). The sweep writes them into each point's record as it measures;
the report reads them back (a CPU's busy share without steal: `busy_share`, which also reads the
summaries written before steal was kept apart).
"""

from __future__ import annotations

import re
from typing import Any

from vmharness.rundir.samples import CPU_FIELDS, PAGE, USER_HZ, Snapshot

COVERED = 0.8  # the snapshots inside a load's window are used alone when they span this share of it
_VFIO = re.compile(r"\bvfio-(?:msix?\[[0-9]+\]|intx)\(([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\)")


def tree(snap: Snapshot, roots: set[int]) -> set[int]:
    """`roots` and every descendant alive in this snapshot."""
    members = {p for p in roots if p in snap.procs}
    children: dict[int, list[int]] = {}
    for pid, p in snap.procs.items():
        children.setdefault(p.ppid, []).append(pid)
    todo = list(members)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in members:
                members.add(child)
                todo.append(child)
    return members


def choose(snaps: list[Snapshot], start: float, end: float,
           wakes: tuple[int, int] | None = None) -> tuple[list[Snapshot], dict[str, Any]]:
    """The snapshots to difference for a load that ran from `start` to `end`, and how they were
    chosen. Given `wakes` (the harness woke the sampler as the load began and again as it ended), the
    two snapshots that answer them and those between: the whole load, whatever the machine's clock
    says ("woken"). Otherwise, by time: those inside the window when at least two span COVERED of it:
    nothing from before or after the load is mixed in. Otherwise (an interval not much shorter than the
    load) the last snapshot before and the first after are added, which hold the whole load but also
    the idle time around it: a machine busy all through the load then reads less busy than it was.
    `how` says which was done, `covered_s` the seconds between the first and last snapshot used,
    `load_s` the window's."""
    load = end - start
    at = {s.wake: i for i, s in enumerate(snaps) if s.wake is not None}
    if wakes is not None and wakes[0] in at and wakes[1] in at and at[wakes[0]] < at[wakes[1]]:
        chosen, how = snaps[at[wakes[0]]:at[wakes[1]] + 1], "woken"
    else:
        inside = [s for s in snaps if start <= s.t <= end]
        if len(inside) >= 2 and inside[-1].t - inside[0].t >= COVERED * load:
            chosen, how = inside, "inside"
        else:
            chosen, how = [s for s in snaps if s.t < start][-1:] + inside + [s for s in snaps if s.t > end][:1], \
                "padded"
    covered = chosen[-1].t - chosen[0].t if len(chosen) >= 2 else 0.0
    return chosen, {"how": how, "load_s": round(load, 3), "covered_s": round(covered, 3)}


def busy_share(shares: dict[str, Any]) -> float | None:
    """A CPU's busy percent without steal, from its shares in a summary: 100 - idle - iowait - steal.
    Steal is time a vCPU was ready to run but its host ran something else: neither idle nor work done,
    so counted as busy it makes a starved guest look saturated. Summaries written before steal was
    left out (their `busy` held it) are recomputed from their parts; one with `busy` alone gives it."""
    try:
        if "idle" in shares:
            return round(100.0 - sum(float(shares.get(k, 0.0)) for k in ("idle", "iowait", "steal")), 2)
        return float(shares["busy"]) if "busy" in shares else None
    except (TypeError, ValueError):
        return None


def _cpu_shares(a: tuple[int, ...], b: tuple[int, ...]) -> dict[str, float]:
    d = [max(0, y - x) for x, y in zip(a, b, strict=False)]  # iowait may go back (proc(5)): counted as none
    total = sum(d) or 1
    shares = {name: round(100.0 * v / total, 2) for name, v in zip(CPU_FIELDS, d, strict=False)}
    shares["busy"] = max(0.0, busy_share(shares) or 0.0)  # without steal, kept beside it; rounded shares: >= -0.02
    return shares


def summarize(snaps: list[Snapshot], roots: set[int] | None = None, sampler_pid: int | None = None,
              interfaces: tuple[str, ...] = ()) -> dict[str, Any]:
    """What the window's first and last snapshots say: CPU per CPU (busy without steal, steal beside
    it), process tree CPU and memory, interrupts and softirqs per CPU (and per device passed through),
    network rates, and the sampler's own CPU."""
    if len(snaps) < 2:
        return {"samples": len(snaps), "note": "fewer than two samples in the window: nothing to difference"}
    a, b = snaps[0], snaps[-1]
    dt = b.t - a.t
    if dt <= 0:
        return {"samples": len(snaps), "note": f"the window's snapshots are {dt:g} s apart: nothing to difference"}
    out: dict[str, Any] = {"samples": len(snaps), "seconds": round(dt, 3)}
    out["cpu"] = {name: _cpu_shares(a.cpus[name], b.cpus[name]) for name in b.cpus if name in a.cpus}
    out["ncpu"] = sum(1 for name in b.cpus if name != "cpu")
    if roots:
        first, last = tree(a, roots), tree(b, roots)
        ticks = sum(max(0, b.procs[p].ticks - (a.procs[p].ticks if p in first else 0)) for p in last)  # a PID reused
        rss = [sum(s.procs[p].rss_pages for p in tree(s, roots)) * PAGE for s in snaps]
        vms = [sum(s.procs[p].vsize for p in tree(s, roots)) for s in snaps]
        out["process"] = {
            "pids_first": len(first), "pids_last": len(last),
            "cpu_percent_of_one": round(100.0 * ticks / USER_HZ / dt, 2),
            "rss_bytes_max": max(rss), "rss_bytes_mean": round(sum(rss) / len(rss)),
            "vms_bytes_max": max(vms),
        }
    if a.irq_per_cpu and len(a.irq_per_cpu) == len(b.irq_per_cpu):
        out["interrupts_per_s_per_cpu"] = [round((y - x) / dt, 1) for x, y in zip(a.irq_per_cpu, b.irq_per_cpu,
                                                                                   strict=True)]
        busy = {name: [round((y - x) / dt, 1) for x, y in zip(a.irq_lines[name], counts, strict=True)]
                for name, counts in b.irq_lines.items() if name in a.irq_lines and counts != a.irq_lines[name]}
        out["interrupt_lines_per_s"] = dict(sorted(busy.items(), key=lambda kv: -sum(kv[1]))[:16])
        vfio, vectors = vfio_rates(a, b, dt)
        if vfio:
            out["vfio_interrupts_per_s"], out["vfio_vectors"] = vfio, vectors
    out["softirqs_per_s_per_cpu"] = {
        name: [round((y - x) / dt, 1) for x, y in zip(a.softirq[name], b.softirq[name], strict=False)]
        for name in ("NET_RX", "NET_TX") if name in a.softirq and name in b.softirq}
    out.update(counters(a, b, dt))
    nets = {}
    for name, (rb, rp, tb, tp) in b.net.items():
        if name not in a.net or (interfaces and name not in interfaces):
            continue
        ra, rpa, ta, tpa = a.net[name]
        if (rb, rp, tb, tp) != (ra, rpa, ta, tpa):
            nets[name] = {k: round(max(0, y - x) / dt) for k, x, y in (  # a re-created interface starts from 0
                ("rx_bytes_per_s", ra, rb), ("rx_packets_per_s", rpa, rp), ("tx_bytes_per_s", ta, tb),
                ("tx_packets_per_s", tpa, tp))}
    out["net"] = nets
    if sampler_pid is not None and sampler_pid in a.procs and sampler_pid in b.procs:
        pa, pb = a.procs[sampler_pid], b.procs[sampler_pid]
        used = (pb.ticks + pb.child_ticks) - (pa.ticks + pa.child_ticks)
        out["sampler_cpu_percent_of_one"] = round(100.0 * used / USER_HZ / dt, 3)
    return out


def counters(a: Snapshot, b: Snapshot, dt: float) -> dict[str, Any]:
    """The kernel's event counters over the window, per second: context switches, page faults (minor and
    major), interrupts (all, and TLB shootdowns: the IPIs a CPU sends to make the others flush their TLB)
    and softirqs by kind, each summed over the CPUs; a counter that went back (a CPU taken offline) gives
    none."""
    out: dict[str, Any] = {}
    if a.ctxt is not None and b.ctxt is not None and b.ctxt >= a.ctxt:
        out["context_switches_per_s"] = round((b.ctxt - a.ctxt) / dt, 1)
    if a.page_faults is not None and b.page_faults is not None and b.page_faults >= a.page_faults:
        out["page_faults_per_s"] = round((b.page_faults - a.page_faults) / dt, 1)
    if a.irq_per_cpu and len(a.irq_per_cpu) == len(b.irq_per_cpu) and sum(b.irq_per_cpu) >= sum(a.irq_per_cpu):
        out["interrupts_per_s"] = round((sum(b.irq_per_cpu) - sum(a.irq_per_cpu)) / dt, 1)
        tlb = [k for k in b.irq_lines if k.startswith("TLB ") and k in a.irq_lines]
        if tlb and sum(b.irq_lines[tlb[0]]) >= sum(a.irq_lines[tlb[0]]):
            out["tlb_shootdowns_per_s"] = round((sum(b.irq_lines[tlb[0]]) - sum(a.irq_lines[tlb[0]])) / dt, 1)
    soft = {name: round((sum(b.softirq[name]) - sum(a.softirq[name])) / dt, 1) for name in b.softirq
            if name in a.softirq and sum(b.softirq[name]) >= sum(a.softirq[name])}
    if soft:
        out["softirqs_per_s"] = soft
    return out


def vfio_rates(a: Snapshot, b: Snapshot, dt: float) -> tuple[dict[str, float], dict[str, int]]:
    """Interrupts per second the host took for each device passed through with vfio-pci (its
    /proc/interrupts lines are named vfio-msix[N](BDF), vfio-msi[N](BDF) or vfio-intx(BDF)), every
    vector summed, and how many vectors each has. A vector that appeared during the window counts
    from zero. With posted interrupts (VT-d PI) a device's interrupts go to the vCPU without the
    host's handler, and these lines stand still."""
    rates: dict[str, float] = {}
    vectors: dict[str, int] = {}
    for name, counts in b.irq_lines.items():
        m = _VFIO.search(name)
        if m is None:
            continue
        before = a.irq_lines.get(name, (0,) * len(counts))
        bdf = m.group(1)
        rates[bdf] = rates.get(bdf, 0.0) + max(0, sum(counts) - sum(before)) / dt
        vectors[bdf] = vectors.get(bdf, 0) + 1
    return {k: round(v, 1) for k, v in rates.items()}, vectors
