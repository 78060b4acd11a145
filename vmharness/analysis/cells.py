"""The measurement table an analysis works from: each instance at each connection count (a Cell), with
its iterations' throughput and latency, each value with the block (run, iteration) it was taken in,
and the figures measured beside them (the server's, the clients' and the guest's vCPU threads' busy
share, packets per request, every side's samples). Read from a run's records once, here; the
statistics and the warnings read only the table. A measurement whose figures cannot be read is an
error naming the record."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vmharness import stats
from vmharness.analysis import packets, sides
from vmharness.analysis.sides import Sides
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.rundir import histogram
from vmharness.rundir.histogram import Histogram
from vmharness.rundir.store import RECORDS, RunDir
from vmharness.stats import Interval, mean_interval

PERCENTILES = ("50", "90", "99", "99.9", "99.99")  # those reported, of a record's histogram.PERCENTILES

Block = tuple[str, int]  # (run directory name, iteration): the measurements taken in one turn


@dataclass
class Cell:
    """One instance at one connection count: its iterations, each value with its block."""

    rps: list[float] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=dict)
    latency_n: list[int] = field(default_factory=list)  # the requests each iteration's latency rests on
    histograms: list[Histogram | None] = field(default_factory=list)  # None: a record from before histograms
    blocks: list[Block] = field(default_factory=list)
    server_busy: list[float] = field(default_factory=list)  # the server machine, all CPUs, without steal
    worker_busy: list[float] = field(default_factory=list)  # the server's process tree, per worker
    client_busy: list[float] = field(default_factory=list)  # the busiest client machine's (not the server's)
    vcpu_busy: list[list[float]] = field(default_factory=list)  # a run's guest: each vCPU thread, from the host
    vcpu_wait: list[list[float]] = field(default_factory=list)  # and the share each waited for a host CPU
    qemu_other: list[float] = field(default_factory=list)  # its QEMU's CPU outside the vCPUs, % of one CPU
    packets: list[tuple[float, bool]] = field(default_factory=list)  # the server's packets per request, on lo?
    sides: Sides = field(default_factory=Sides)  # steal, each client and generator thread, the host's vfio
    exits: list[dict[str, float]] = field(default_factory=list)  # under KVM: VM exits per request by kind
    events: list[tuple[Block, dict[str, float]]] = field(default_factory=list)  # the server's, per request
    idle_events: dict[str, float] = field(default_factory=dict)  # each second without load: left out of `events`
    # each event some point had no more of each second than `idle_events`: how many points (no figure in them)
    events_under_idle: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    requests: int = 0

    def values(self) -> list[float]:
        """The throughput, one value per block (the mean of a block's repeated measurements): what the
        intervals rest on, since measurements in one boot share its luck."""
        return list(self.by_block(self.rps).values())

    def interval(self) -> Interval:
        return mean_interval(self.values(), stats.LEVEL)

    def by_block(self, values: list[float]) -> dict[Block, float]:
        """One value per block (the mean, should a block hold several)."""
        return block_means(zip(self.blocks, values, strict=True))


def block_means(pairs: Iterable[tuple[Block, float]]) -> dict[Block, float]:
    """(block, value) pairs as one value per block: the mean, should a block hold several."""
    groups: dict[Block, list[float]] = {}
    for b, v in pairs:
        groups.setdefault(b, []).append(v)
    return {b: statistics.fmean(vs) for b, vs in groups.items()}


def cells(run: RunDir) -> tuple[dict[str, dict[int, Cell]], int]:
    """Cells by instance and connections, and the number of failed points."""
    manifest = run.manifest
    server = manifest.get("machines", {}).get("server", {}).get("machine", "local")
    cpus = manifest.get("machines", {}).get("server", {}).get("cpus", "")
    workers = manifest.get("config", {}).get("server", {}).get("workers") or (int(cpus) if is_digits(str(cpus)) else 0)
    clients = [c["machine"] for c in manifest.get("machines", {}).get("clients", [])]
    out: dict[str, dict[int, Cell]] = {}
    failed = 0
    idle = idle_events(run, server)
    for r in run.records():
        if r.get("kind") != "measurement":
            continue
        if not r.get("ok"):
            failed += 1
            continue
        try:
            client = r["client"]
            rps, block = float(client["requests_per_s"]), (run.path.name, int(r["iteration"]))
            latency = histogram.from_record(client["latency_us"], int(client["requests"]))
            errors, requests = int(client["errors"]["total"]), int(client["requests"])
            cell = out.setdefault(str(r["instance"]), {}).setdefault(int(r["connections"]), Cell(idle_events=idle))
        except (KeyError, TypeError, ValueError) as exc:
            raise _damaged(run, r, f"{type(exc).__name__}: {exc}") from exc
        cell.rps.append(rps)
        cell.blocks.append(block)
        for q in PERCENTILES:
            cell.latency.setdefault(q, []).append(latency.percentiles[q])
        cell.latency_n.append(latency.count)
        cell.histograms.append(latency.histogram)
        cell.errors += errors
        cell.requests += requests
        given = r.get("samples")
        samples: dict[str, Any] = given if isinstance(given, dict) else {}  # optional: damaged is as absent
        here = samples.get(server)
        counted, under = _events(here, rps, idle, f"samples.{server}", run, r) if isinstance(here, dict) else ({}, ())
        if counted or under:
            cell.events.append((block, counted))
        for key in under:
            cell.events_under_idle[key] = cell.events_under_idle.get(key, 0) + 1
        busy, _ = sides.cpu_of(samples, server)
        if busy is not None:
            cell.server_busy.append(busy)
        cell.sides.add(r, server, clients)
        process = here.get("process") if isinstance(here, dict) else None
        if isinstance(process, dict) and isinstance(process.get("cpu_percent_of_one"), int | float) and workers:
            cell.worker_busy.append(min(100.0, process["cpu_percent_of_one"] / workers))
        loads = [b for c in clients if c != server and (b := sides.cpu_of(samples, c)[0]) is not None]
        if loads:
            cell.client_busy.append(max(loads))
        sent = packets.per_request(samples, server, rps)
        if sent is not None:
            cell.packets.append(sent)
        host = r.get("host")
        vcpus = host.get("vcpu_busy_percent") if isinstance(host, dict) else None
        if isinstance(vcpus, list) and vcpus and all(isinstance(v, int | float) for v in vcpus):
            cell.vcpu_busy.append([float(v) for v in vcpus])
        waits = host.get("vcpu_wait_percent") if isinstance(host, dict) else None
        if isinstance(waits, list) and waits and all(isinstance(v, int | float) for v in waits):
            cell.vcpu_wait.append([float(v) for v in waits])
        other = host.get("qemu_other_percent") if isinstance(host, dict) else None
        if isinstance(other, int | float) and not isinstance(other, bool):
            cell.qemu_other.append(float(other))
        if isinstance(host, dict) and "kvm_exits" in host:
            cell.exits.append(_exits_per_request(host, rps, run, r))
    return out, failed


def _exits_per_request(host: dict[str, Any], rps: float, run: RunDir, r: dict[str, Any]) -> dict[str, float]:
    """A point's VM exits per request by kind: KVM's counts over the host's reading window, over the
    requests the client's rate puts in it. A count or window that is not a number is an error naming the
    record: left out, it would change the answer without a word."""
    counts, window = host["kvm_exits"], host.get("window_s")
    if not (isinstance(counts, dict) and counts and all(_count(v) for v in counts.values())
            and isinstance(window, int | float) and not isinstance(window, bool) and window > 0 and rps > 0):
        raise _damaged(run, r, "host.kvm_exits must be counts by kind over a positive host.window_s, at a "
                               "positive rate")
    return {str(k): v / (rps * window) for k, v in counts.items()}


def _events(summary: dict[str, Any], rps: float, idle: dict[str, float], where: str, run: RunDir,
            r: dict[str, Any]) -> tuple[dict[str, float], tuple[str, ...]]:
    try:
        return events_per_request(summary, rps, idle)
    except ValueError as exc:
        raise _damaged(run, r, f"{where}.{exc}") from exc


def _damaged(run: RunDir, r: dict[str, Any], fault: str) -> HarnessError:
    """The error for a measurement record a reader cannot take, naming the file, the record and the fault."""
    return HarnessError(f"{run.path / RECORDS}: the measurement {r.get('key')!r} is damaged ({fault})",
                        "a run writes these records itself: was the file edited? remove the damaged line and "
                        "re-measure with --resume")


# a sample summary's figure, and its name in the report (softirqs also by kind: "softirq NET_RX")
EVENTS = (("context_switches_per_s", "context switches"), ("page_faults_per_s", "page faults"),
          ("interrupts_per_s", "interrupts"), ("tlb_shootdowns_per_s", "TLB shootdowns"))


def event_rates(summary: dict[str, Any]) -> dict[str, float]:
    """The kernel's events each second in a machine's sample summary ({} when it has none); ValueError
    naming a figure that is there but not a number."""
    out: dict[str, float] = {}
    for key, name in EVENTS:
        if key in summary:
            out[name] = _number(summary[key], key)
    soft = summary.get("softirqs_per_s")
    if soft is not None:
        if not isinstance(soft, dict):
            raise ValueError("softirqs_per_s is not a table of rates")
        kinds = {f"softirq {k}": _number(v, f"softirqs_per_s.{k}") for k, v in soft.items()}
        if kinds:
            out["softirqs"] = sum(kinds.values())
            out.update(kinds)
    return out


def events_per_request(summary: dict[str, Any], rps: float,
                       idle: dict[str, float] | None = None) -> tuple[dict[str, float], tuple[str, ...]]:
    """A point's events per request, less what the machine does each second without load (`idle`): timers,
    the samplers' forks and the agent's polls, which divided by a falling throughput would look like
    more work per request. And the events it had no more of each second than the idle reading: those are
    not told from the background, and get no figure. A guest does less in the background than its idle
    reading where its vCPU runs less (a capped control, a vCPU starved on a loaded host): a CI run's
    control served 58 requests a second with 240 context switches against an idle 281, which read as 0
    per request where its other boots read 0.1 to 0.4."""
    if rps <= 0:
        return {}, ()
    idle = idle or {}
    rates = event_rates(summary)
    under = tuple(k for k, v in rates.items() if idle.get(k, 0.0) > 0 and v <= idle[k])
    return {k: (v - idle.get(k, 0.0)) / rps for k, v in rates.items() if k not in under}, under


def idle_events(run: RunDir, server: str) -> dict[str, float]:
    """The server's kernel events each second without load, averaged over the idle records that sampled
    it (a run with a control takes one in each baseline boot; bench/sweep.py); {} without any."""
    rows = []
    for r in run.records():
        given = r.get("samples") if r.get("kind") == "idle" else None
        here = given.get(server) if isinstance(given, dict) else None
        if isinstance(here, dict):
            try:
                rows.append(event_rates(here))
            except ValueError as exc:
                raise HarnessError(f"{run.path / RECORDS}: the idle record of {r.get('instance')!r} iteration "
                                   f"{r.get('iteration')!r} is damaged (samples.{server}.{exc})",
                                   "a run writes these records itself: was the file edited? remove the damaged "
                                   "line") from exc
    return {k: statistics.fmean(row[k] for row in rows if k in row) for k in sorted({k for row in rows for k in row})}


def _number(v: object, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{key} is not a number")
    return float(v)


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def vcpu_means(cell: Cell, waited: bool = False) -> list[float] | None:
    """Each vCPU thread's busy share (percent) at this point, averaged over the iterations that have it;
    with `waited`, the share it waited for a host CPU."""
    got = cell.vcpu_wait if waited else cell.vcpu_busy
    rows = [row for row in got if len(row) == len(got[0])] if got else []
    return [statistics.fmean(col) for col in zip(*rows, strict=True)] if rows else None


def idle_vcpus(run: RunDir, instance: str) -> list[float] | None:
    """Each vCPU thread's busy share (percent) without load in `instance`'s sessions, averaged (the
    `idle` records a run with a control writes; bench/sweep.py)."""
    rows = [r["vcpu_busy_percent"] for r in run.records() if r.get("kind") == "idle" and r.get("instance") == instance
            and isinstance(r.get("vcpu_busy_percent"), list)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in r["vcpu_busy_percent"])]
    rows = [row for row in rows if rows and len(row) == len(rows[0]) and row]
    return [statistics.fmean(col) for col in zip(*rows, strict=True)] if rows else None



def server_busy(cell: Cell) -> float | None:
    """The server's busy percent at a point: its machine's (without steal) or its workers' per worker,
    whichever is higher (its workers saturated count, even on a larger machine)."""
    known = [statistics.fmean(v) for v in (cell.server_busy, cell.worker_busy) if v]
    return max(known) if known else None
