"""Samplers: a fixed shell loop on every machine of a run (server, clients, and under `run` the host
that runs the guest) prints a snapshot of /proc every `interval` seconds; the harness keeps the stream
in the run directory and summarises the window of each measurement: what the load generator measured,
from the snapshots inside it where they cover it (`choose`). Nothing is installed on the machine: sh,
cat, date and sleep do it.

A snapshot: wall time, then /proc/stat (CPU per CPU), /proc/net/dev, /proc/interrupts, /proc/softirqs
and the stat line of every process — from which the server's whole process tree, workers started later
included, is found at each instant by parent links, and the sampler's own cost is read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness.digits import is_digits

# $1: the interval. `@pid` first, so the harness can read the loop's own CPU time (with its children).
# One cat per snapshot (the files' own headers tell them apart): three forks a second in all.
SCRIPT = r"""echo "@pid $$"
while :; do
  echo "@t $(date +%s.%N)"
  cat /proc/stat /proc/net/dev /proc/interrupts /proc/softirqs /proc/[0-9]*/stat 2>/dev/null
  echo "@end"
  sleep "$1"
done
"""
USER_HZ = 100  # the unit of /proc times on Linux
PAGE = 4096
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class Proc:
    comm: str
    ppid: int
    ticks: int  # utime + stime
    child_ticks: int  # cutime + cstime: children it has waited for
    vsize: int
    rss_pages: int


@dataclass
class Snapshot:
    t: float
    cpus: dict[str, tuple[int, ...]] = field(default_factory=dict)  # "cpu" (all) and "cpu0".. -> CPU_FIELDS
    net: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # rx bytes, rx pkts, tx bytes, tx pkts
    irq_per_cpu: tuple[int, ...] = ()
    irq_lines: dict[str, tuple[int, ...]] = field(default_factory=dict)  # "IRQ name" -> per CPU
    softirq: dict[str, tuple[int, ...]] = field(default_factory=dict)
    procs: dict[int, Proc] = field(default_factory=dict)


def proc_line(line: str) -> tuple[int, Proc] | None:
    """A /proc/PID/stat (or /proc/PID/task/TID/stat) line: the PID or TID and its figures; None for
    a line that is not one whole."""
    head, sep, tail = line.rpartition(")")
    if not sep:
        return None
    pid_text, _, comm = head.partition(" (")
    f = tail.split()
    try:
        return int(pid_text), Proc(comm, int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14]),
                                   int(f[20]), int(f[21]))
    except (ValueError, IndexError):
        return None  # a process that went away mid-read


def _interrupts(lines: list[str], snap: Snapshot) -> None:
    if not lines:
        return
    ncpu = len(lines[0].split())
    totals = [0] * ncpu
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        counts = []
        for value in fields[:ncpu]:
            if not is_digits(value):
                break
            counts.append(int(value))
        if len(counts) != ncpu:
            continue  # ERR:, MIS: and the like
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        label = " ".join(fields[ncpu:])
        snap.irq_lines[f"{name.strip()} {label}".strip()] = tuple(counts)
    snap.irq_per_cpu = tuple(totals)


_PROC_LINE = re.compile(r"[0-9]+ \(")
_CPU_HEADER = re.compile(r"\s+CPU0\b")


def _section(line: str, section: str) -> str | None:
    """The file a line starts, if it starts one (in cat's order: stat, net/dev, interrupts, softirqs)."""
    if line.startswith("cpu") and section in ("", "stat"):
        return "stat"
    if line.startswith("Inter-|"):
        return "net"
    if _CPU_HEADER.match(line):
        return "irq" if section != "irq" else "softirq"
    if _PROC_LINE.match(line):
        return "procs"
    return None


def has_snapshot_after(path: Path, end: float) -> bool:
    """Whether a sampler's stream file holds a complete snapshot (up to a whole `@end` line) taken at or
    after `end`: the last one's time, read from the file's tail (a snapshot is some tens of KiB)."""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - (512 << 10)))
        tail = b"\n" + f.read() + b"\n"
    stop = tail.rfind(b"\n@end\n")
    start = tail.rfind(b"\n@t ", 0, stop) if stop >= 0 else -1
    if start < 0:
        return False
    try:
        return float(tail[start + 4:tail.index(b"\n", start + 1)]) >= end
    except ValueError:
        return False


def parse(text: str, damaged: list[tuple[int, str]] | None = None) -> tuple[int | None, list[Snapshot]]:
    """The sampler's PID and its complete snapshots: from an `@t` line to its `@end` line. One without its
    `@end` is dropped unread, wherever it was cut (a kill or a full disk mid-write, or a read that began
    inside it). A complete one that cannot be read (a line cut short mid-stream: the disk filled, then had
    room again) is left out, noted in `damaged` as (its `@t` line's number in `text`, that line: the fault)."""
    pid: int | None = None
    snaps: list[Snapshot] = []
    begun: int | None = None  # the line number of the current snapshot's `@t` line
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("@pid ") and line[5:].isdecimal() and (n < len(lines) or text.endswith("\n")):
            pid = int(line[5:])
        elif line.startswith("@t "):
            begun = n
        elif line == "@end" and begun is not None:
            try:
                snaps.append(_snapshot(lines[begun - 1:n - 1]))
            except (ValueError, IndexError) as exc:
                if damaged is not None:
                    damaged.append((begun, f"{lines[begun - 1]!r}: {exc or type(exc).__name__}"))
            begun = None
    return pid, snaps


def _snapshot(lines: list[str]) -> Snapshot:
    """One complete snapshot from its lines (`@t` first, `@end` left off); ValueError on a damaged one."""
    snap, section, irq_lines = Snapshot(float(lines[0][3:])), "", []
    if not math.isfinite(snap.t):
        raise ValueError(f"its time {lines[0][3:]!r} is not a finite number")
    for line in lines[1:]:
        section = _section(line, section) or section
        if section == "stat" and line.startswith("cpu"):
            name, *values = line.split()
            snap.cpus[name] = tuple(int(v) for v in values[:len(CPU_FIELDS)])
        elif section == "net" and ":" in line and "|" not in line:
            name, _, rest = line.partition(":")
            v = rest.split()
            if len(v) < 16:
                raise ValueError(f"/proc/net/dev line {name.strip()!r} has {len(v)} of its 16 fields")
            snap.net[name.strip()] = (int(v[0]), int(v[1]), int(v[8]), int(v[9]))
        elif section == "irq":
            irq_lines.append(line)
        elif section == "softirq" and ":" in line:
            name, _, rest = line.partition(":")
            snap.softirq[name.strip()] = tuple(int(v) for v in rest.split())
        elif section == "procs" and (parsed := proc_line(line)):
            snap.procs[parsed[0]] = parsed[1]
    _interrupts(irq_lines, snap)
    return snap


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


COVERED = 0.8  # the snapshots inside a load's window are used alone when they span this share of it
_VFIO = re.compile(r"\bvfio-(?:msix?\[[0-9]+\]|intx)\(([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\)")


def choose(snaps: list[Snapshot], start: float, end: float) -> tuple[list[Snapshot], dict[str, Any]]:
    """The snapshots to difference for a load that ran from `start` to `end`, and how they were
    chosen. Those inside the window when at least two span COVERED of it: nothing from before or after
    the load is mixed in. Otherwise (an interval not much shorter than the load) the last snapshot
    before and the first after are added, which hold the whole load but also the idle time around it:
    a machine busy all through the load then reads less busy than it was. `how` says which was done,
    `covered_s` the seconds between the first and last snapshot used, `load_s` the window's."""
    inside = [s for s in snaps if start <= s.t <= end]
    load = end - start
    if len(inside) >= 2 and inside[-1].t - inside[0].t >= COVERED * load:
        chosen, how = inside, "inside"
    else:
        chosen, how = [s for s in snaps if s.t < start][-1:] + inside + [s for s in snaps if s.t > end][:1], "padded"
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
