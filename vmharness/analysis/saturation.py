"""The answer to the researcher's question, from a run directory: the baseline's saturation point
(where its highest mean throughput lies and how high, each with a bootstrap interval), each other
instance's throughput and latency change there as a ratio (paired by block where the runner took
turns), where the noise comes from and what would tame it, what every side (server, host, clients)
was doing at the peak (vmharness/analysis/sides.py), and the reasons not to trust the answer, listed
first. The methods are in vmharness/stats.py and docs/statistics.md."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vmharness import stats
from vmharness.analysis import hostdiff, loadcurve, packets, sides, variants
from vmharness.analysis.loadcurve import LoadAnalysis
from vmharness.analysis.sides import SATURATED, Sides
from vmharness.analysis.variants import Control, Diff
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.rundir import histogram
from vmharness.rundir.histogram import Histogram
from vmharness.rundir.store import RECORDS, RunDir, left_out_line
from vmharness.stats import Change, Interval, Peak, Plan, Split, mean_interval, ratio_change

LEVEL = stats.LEVEL
ERROR_SHARE = 0.01
NOISY = 0.10  # relative half-width of the throughput interval
TARGET = 0.02  # the interval a plan aims for (± of the mean), unless sweep.until_ci names one
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
    packets: list[tuple[float, bool]] = field(default_factory=list)  # the server's packets per request, on lo?
    sides: Sides = field(default_factory=Sides)  # steal, each client and generator thread, the host's vfio
    errors: int = 0
    requests: int = 0

    def interval(self) -> Interval:
        return mean_interval(self.rps, LEVEL)

    def by_block(self, values: list[float]) -> dict[Block, float]:
        """One value per block (the mean, should a block hold several)."""
        groups: dict[Block, list[float]] = {}
        for b, v in zip(self.blocks, values, strict=True):
            groups.setdefault(b, []).append(v)
        return {b: statistics.fmean(vs) for b, vs in groups.items()}


@dataclass(frozen=True)
class Design:
    """How the run was measured, as far as the statistics care."""

    block: str = "iteration"  # "boot" when every iteration of an instance was a boot of its guest (`run`)
    block_seconds: float = 0.0  # what one more block costs beyond its measurements (a boot)
    measure_seconds: float = 31.0  # one measurement: sweep.duration + sweep.wait
    target: float = TARGET


@dataclass(frozen=True)
class Noise:
    split: Split
    plan: Plan | None
    target: float


def cells(run: RunDir) -> tuple[dict[str, dict[int, Cell]], int]:
    """Cells by instance and connections, and the number of failed points."""
    manifest = run.manifest
    server = manifest.get("machines", {}).get("server", {}).get("machine", "local")
    cpus = manifest.get("machines", {}).get("server", {}).get("cpus", "")
    workers = manifest.get("config", {}).get("server", {}).get("workers") or (int(cpus) if is_digits(str(cpus)) else 0)
    clients = [c["machine"] for c in manifest.get("machines", {}).get("clients", [])]
    out: dict[str, dict[int, Cell]] = {}
    failed = 0
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
            cell = out.setdefault(str(r["instance"]), {}).setdefault(int(r["connections"]), Cell())
        except (KeyError, TypeError, ValueError) as exc:
            raise HarnessError(f"{run.path / RECORDS}: the measurement {r.get('key')!r} is damaged "
                               f"({type(exc).__name__}: {exc})", "a run writes these records itself: was the "
                               "file edited? remove the damaged line and re-measure with --resume") from exc
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
        busy, _ = sides.cpu_of(samples, server)
        if busy is not None:
            cell.server_busy.append(busy)
        cell.sides.add(r, server, clients)
        here = samples.get(server)
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
    return out, failed


def vcpu_means(cell: Cell) -> list[float] | None:
    """Each vCPU thread's busy share (percent) at this point, averaged over the iterations that have it."""
    rows = [row for row in cell.vcpu_busy if len(row) == len(cell.vcpu_busy[0])] if cell.vcpu_busy else []
    return [statistics.fmean(col) for col in zip(*rows, strict=True)] if rows else None


def idle_vcpus(run: RunDir, instance: str) -> list[float] | None:
    """Each vCPU thread's busy share (percent) without load in `instance`'s sessions, averaged (the
    `idle` records a run with a control writes; bench/sweep.py)."""
    rows = [r["vcpu_busy_percent"] for r in run.records() if r.get("kind") == "idle" and r.get("instance") == instance
            and isinstance(r.get("vcpu_busy_percent"), list)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in r["vcpu_busy_percent"])]
    rows = [row for row in rows if rows and len(row) == len(rows[0]) and row]
    return [statistics.fmean(col) for col in zip(*rows, strict=True)] if rows else None


@dataclass
class Analysis:
    baseline: str
    peak: int | None
    peak_interval: Interval | None  # the t-interval of the peak point's mean
    plausible_peaks: list[int]
    changes: dict[str, dict[str, Change]]  # instance -> "throughput" / "p99" ... -> change at the peak
    flags: list[str]
    cells: dict[str, dict[int, Cell]]
    failed: int
    peak_estimate: Peak | None = None  # where the peak lies and how high, with bootstrap intervals
    noise: dict[str, Noise] = field(default_factory=dict)  # instance -> its variance split and plan
    design: Design = Design()
    variants: list[Diff] = field(default_factory=list)  # each instance's facts against the baseline's
    control: Control | None = None  # the positive control's check (`run --control`)
    load: LoadAnalysis | None = None  # latency against load (the open-loop points), if the run has any
    capacity: list[dict[str, Any]] = field(default_factory=list)  # what each client could generate
    at_peak: dict[str, Any] | None = None  # every side's figures at the baseline's peak (sides.at_peak)


def session_flags(run: RunDir, prefix: str = "") -> list[str]:
    """`vmharness run`'s guests that did not boot or could not serve, each with why, and those whose
    QEMU threads were not held to the planned CPUs."""
    out = []
    for r in run.records():
        if r.get("kind") != "session":
            continue
        where = f"{prefix}{r['instance']} iteration {r['iteration']}"
        pins = r.get("pinning") or {}
        if not r.get("ok"):
            out.append(f"{where} measured nothing: {r.get('error', '?')}")
        elif pins.get("ok") is False:
            out.append(f"not pinned: {where}'s vCPU threads ran on CPUs {pins['vcpus']} and its emulator on "
                       f"{pins['emulator']!r}, planned {pins['planned_vcpus']} and {pins['planned_emulator']}")
    return out


def design(runs: list[RunDir]) -> Design:
    """Boots or plain iterations, what a boot and a measurement cost, and the width a plan aims for:
    from the runs' records and configuration (the first run's, for the costs)."""
    boots = [float(r["boot_seconds"]) for run in runs for r in run.records()
             if r.get("kind") == "session" and r.get("ok") and isinstance(r.get("boot_seconds"), int | float)]
    booted = any(r.get("kind") == "session" for run in runs for r in run.records())
    sweep = runs[0].manifest.get("config", {}).get("sweep", {}) if runs else {}
    duration, wait, until = (sweep.get(k) for k in ("duration", "wait", "until_ci"))
    number = (int, float)
    return Design("boot" if booted else "iteration", statistics.fmean(boots) if boots else 0.0,
                  (duration if isinstance(duration, number) else 30.0) + (wait if isinstance(wait, number) else 1.0),
                  until if isinstance(until, number) and 0 < until < 1 else TARGET)


def analyse(run: RunDir, baseline: str | None = None) -> Analysis:
    table, failed = cells(run)
    names = [i["name"] for i in run.manifest.get("config", {}).get("instance", [])] or sorted(table)
    a = analyse_table(table, failed, baseline or (names[0] if names else None), [run.manifest],
                      session_flags(run), design([run]))
    a.variants = variants.diffs(run.manifest, a.baseline)
    base_cell = table.get(a.baseline, {}).get(a.peak) if a.peak is not None else None
    a.control = variants.control(run.manifest, a.changes, vcpu_means(base_cell) if base_cell else None,
                                 idle_vcpus(run, a.baseline)) if a.baseline == (names[0] if names else None) else None
    extra = variants.diff_flags(a.variants, a.baseline)
    if a.control is not None and (flag := variants.control_flag(a.control)):
        extra.append(flag)
    a.flags[:0] = extra
    records = list(run.records())
    a.load = loadcurve.analyse(records, a.baseline, run.path / RECORDS)
    a.capacity = [r for r in records if r.get("kind") == "capacity"]
    peak = a.peak_interval.mean if a.peak_interval is not None else 0.0
    highest = max((r.requested for r in a.load.rows), default=0.0) if a.load is not None else 0.0
    a.flags += (a.load.flags if a.load is not None else []) + loadcurve.capacity_flags(a.capacity, peak, highest)
    a.flags[:0] = left_out_line([run])  # first: every figure above is without them
    a.flags[:0] = hostdiff.run_flags(run)  # the host under every figure, before all
    return a


def compare(runs: list[RunDir], baseline: str | None = None) -> Analysis:
    """Several runs as one: each instance named RUN/INSTANCE; the baseline is the first run's first
    instance unless named. Points are compared only at equal connection counts, and paired only
    within one run (the blocks of two runs are not the same turns)."""
    table: dict[str, dict[int, Cell]] = {}
    failed = 0
    first = None
    sessions: list[str] = []
    for run in runs:
        cells_of, lost = cells(run)
        failed += lost
        sessions += session_flags(run, f"{run.path.name}/")
        names = [i["name"] for i in run.manifest.get("config", {}).get("instance", [])] or sorted(cells_of)
        for name in names:
            if name in cells_of:
                key = f"{run.path.name}/{name}"
                if key in table:
                    raise HarnessError(f"two runs are both named {run.path.name}", "compare runs in folders of "
                                       "different names")
                table[key] = cells_of[name]
                first = first or key
    a = analyse_table(table, failed, baseline or first, [r.manifest for r in runs], sessions, design(runs))
    a.flags[:0] = left_out_line(runs)
    a.flags[:0] = hostdiff.compare_flags(runs)  # the hosts' differences, before all
    return a


def noise(by_count: dict[int, Cell], d: Design) -> Noise | None:
    """The variance split of one instance's throughput over the blocks and counts it measured
    completely (the blocks that measured every count, or else the counts that every block measured)."""
    grid: dict[Block, dict[int, float]] = {}
    for count, cell in by_count.items():
        for blk, value in cell.by_block(cell.rps).items():
            grid.setdefault(blk, {})[count] = value
    counts = sorted(by_count)
    whole = [b for b in grid if len(grid[b]) == len(counts)]
    shared = [c for c in counts if all(c in row for row in grid.values())]
    if len(whole) * len(counts) >= len(grid) * len(shared):
        rows = [[grid[b][c] for c in counts] for b in whole]
    else:
        rows = [[row[c] for c in shared] for row in grid.values()]
    found = stats.split(np.array(rows, dtype=float).reshape(len(rows), -1), LEVEL) if rows else None
    if found is None:
        return None
    return Noise(found, stats.plan(found, d.target, d.block_seconds, d.measure_seconds, LEVEL), d.target)


def changes_at(base: Cell, other: Cell, block: str) -> dict[str, Change]:
    """Throughput and every latency percentile of `other` against `base`, paired by block."""
    out = {"throughput": ratio_change(base.by_block(base.rps), other.by_block(other.rps), block, LEVEL)}
    for q in PERCENTILES:
        out[f"p{q}"] = ratio_change(base.by_block(base.latency[q]), other.by_block(other.latency[q]), block, LEVEL)
    return out


def analyse_table(table: dict[str, dict[int, Cell]], failed: int, baseline: str | None,
                  manifests: list[dict[str, Any]], sessions: list[str] | None = None,
                  d: Design | None = None) -> Analysis:
    d = d or Design()
    flags: list[str] = list(sessions or [])
    if failed:
        flags.append(f"{failed} points failed after their retries: see records.jsonl")
    if not table:
        return Analysis(baseline or "?", None, None, [], {}, ["no successful measurement in this run", *flags],
                        table, failed, design=d)
    base = baseline or sorted(table)[0]
    if base not in table:
        return Analysis(base, None, None, [], {}, [f"the baseline {base!r} has no successful measurement", *flags],
                        table, failed, design=d)
    curve = {c: cell.interval() for c, cell in table[base].items()}
    top = stats.peak({c: cell.rps for c, cell in table[base].items()}, LEVEL)
    peak = top.at
    plausible = [c for c in sorted(curve) if c != peak and (top.at_low <= c <= top.at_high or _reaches(curve[c], top))]
    cell = table[base][peak]
    _flags(manifests, peak, cell, curve, plausible, table, flags)
    changes = {name: changes_at(cell, by_count[peak], d.block) for name, by_count in table.items()
               if name != base and peak in by_count}
    split = {name: n for name, by_count in table.items() if (n := noise(by_count, d)) is not None}
    return Analysis(base, peak, curve[peak], plausible, changes, flags, table, failed, top, split, d,
                    at_peak=sides.at_peak(cell.sides, server_busy(cell), vcpu_means(cell), curve[peak].mean))


def server_busy(cell: Cell) -> float | None:
    """The server's busy percent at a point: its machine's (without steal) or its workers' per worker,
    whichever is higher (its workers saturated count, even on a larger machine)."""
    known = [statistics.fmean(v) for v in (cell.server_busy, cell.worker_busy) if v]
    return max(known) if known else None


def _reaches(point: Interval, top: Peak) -> bool:
    """A point measured once (the adaptive search's ladder) could be the peak if its one value reaches
    the peak height's interval; without that interval nothing rules it out."""
    return point.n < 2 and (not top.bounded or point.mean >= top.low)


def _flags(manifests: list[dict[str, Any]], peak: int, cell: Cell, curve: dict[int, Interval],
           plausible: list[int], table: dict[str, dict[int, Cell]], flags: list[str]) -> None:
    busy = server_busy(cell)
    if busy is not None and busy < SATURATED:
        flags.append(f"not saturated: the server was {busy:.0f}% busy at the peak ({peak} connections); "
                     "overhead is hidden by idle CPU (seed 001)")
    vcpus = vcpu_means(cell)
    if vcpus is not None and (busy is None or busy >= SATURATED) and min(vcpus) < SATURATED:
        flags.append(f"the guest looks busy ({busy:.0f}%) but its vCPU threads ran "
                     f"{', '.join(f'{v:.0f}%' for v in vcpus)} of the time on the host at the peak: the rest they "
                     "waited (for QEMU's I/O thread, or preempted); the guest's CPU is not all that limits it"
                     if busy is not None else
                     f"the guest's vCPU threads ran {', '.join(f'{v:.0f}%' for v in vcpus)} of the time on the "
                     "host at the peak")
    flags += sides.flags(cell.sides, peak, busy, curve[peak].mean)
    for manifest in manifests:
        machines = manifest.get("machines", {})
        server = machines.get("server", {}).get("machine")
        if server in [c.get("machine") for c in machines.get("clients", [])]:
            flags.append("the server and a client share a machine: their CPU use cannot be told apart")
            break
        if manifest.get("guest", {}).get("shares_host_with_client"):
            flags.append("the guest runs on a client's machine: wrk and the guest's vCPUs share its CPUs")
            break
    if peak == max(curve):
        flags.append(f"the throughput peaks at the largest count ({peak}): it may still rise; extend the sweep")
    if plausible:
        flags.append(f"the peak is not distinct: {', '.join(map(str, plausible))} connections are within its "
                     f"{LEVEL:.0%} interval")
    if curve[peak].n < 2:
        flags.append("one iteration at the peak: no interval, so no overhead can be told from noise; add iterations")
    elif curve[peak].relative_half > NOISY:
        flags.append(f"noisy: the peak's {LEVEL:.0%} interval is ±{curve[peak].relative_half:.0%} of its mean "
                     f"over {curve[peak].n} iterations; add iterations")
    for name, by_count in table.items():
        for count, c in sorted(by_count.items()):
            if c.requests and c.errors / c.requests > ERROR_SHARE:
                flags.append(f"errors: {name} at {count} connections had {c.errors / c.requests:.1%} errors "
                             "or non-2xx responses")
    config = manifests[0].get("config", {}).get("server", {}) if manifests else {}
    for name, by_count in table.items():
        if peak in by_count and (said := packets.flag(name, peak, by_count[peak].packets, config)):
            flags.append(said)
    if any(m.get("guest", {}).get("kvm") is False for m in manifests):
        flags.append("no KVM: the guest ran under TCG; these are not hardware numbers")
