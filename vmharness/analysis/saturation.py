"""The answer to the researcher's question, from a run directory: the baseline's saturation point
(where its highest mean throughput lies and how high, each with a bootstrap interval), each other
instance's throughput and latency change there as a ratio (paired by block where the runner took
turns), where the noise comes from and what would tame it, what every side (server, host, clients)
was doing at the peak (vmharness/analysis/sides.py), and the reasons not to trust the answer, listed
first. The methods are in vmharness/stats.py and docs/statistics.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vmharness import stats
from vmharness.analysis import (
    events,
    exits,
    flame,
    hostdiff,
    hostnoise,
    loadcurve,
    profiles,
    sides,
    studies,
    syscalls,
    variants,
)
from vmharness.analysis.cells import PERCENTILES, Block, Cell, cells, idle_vcpus, server_busy, vcpu_means
from vmharness.analysis.flags import peak_flags, session_flags
from vmharness.analysis.loadcurve import LoadAnalysis
from vmharness.analysis.switch_why import Why, explain
from vmharness.analysis.variants import Control, Diff
from vmharness.bench import budget
from vmharness.errors import HarnessError
from vmharness.rundir.record_check import load_target
from vmharness.rundir.store import MANIFEST, RECORDS, RunDir, left_out_line
from vmharness.stats import Change, Interval, Peak, Plan, Split, ratio_change

LEVEL = stats.LEVEL
TARGET = 0.02  # the interval a plan aims for (± of the mean), unless sweep.until_ci names one


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
    exits: list[exits.View] = field(default_factory=list)  # each instance's VM exits per request there
    exits_note: str | None = None  # why none were counted (TCG), or None
    events: list[events.View] = field(default_factory=list)  # the server's kernel events per request there
    study: studies.View | None = None  # an attribution study's answer there ([study])
    calls: syscalls.View | None = None  # the server's system calls per request there ([explain] syscalls)
    work_us: dict[str, float | None] = field(default_factory=dict)  # vCPU host time per request less idle's
    why: list[syscalls.Reason] = field(default_factory=list)  # what explains each variant's cost
    profiles: profiles.View | None = None  # what grew per request in the server's profile ([explain] profile)
    switch_why: tuple[Why, ...] = ()  # what explains each switch's cost, in a study
    under: dict[str, str] = field(default_factory=dict)  # a flag under every figure -> "host" or "records"
    host_noise: list[hostnoise.HostNoise] = field(default_factory=list)  # each shared host boot's three levels


def design(runs: list[RunDir]) -> Design:
    """Boots or plain iterations, what a boot and a measurement cost, and the width a plan aims for:
    from the runs' records and configuration (the first run's, for the costs)."""
    boot = budget.block_seconds(r for run in runs for r in run.records())
    booted = any(r.get("kind") == "session" for run in runs for r in run.records())
    sweep = runs[0].manifest.get("config", {}).get("sweep", {}) if runs else {}
    duration, wait, until = (sweep.get(k) for k in ("duration", "wait", "until_ci"))
    number = (int, float)
    return Design("boot" if booted else "iteration", boot,
                  (duration if isinstance(duration, number) else 30.0) + (wait if isinstance(wait, number) else 1.0),
                  until if isinstance(until, number) and 0 < until < 1 else TARGET)


def analyse(run: RunDir, baseline: str | None = None) -> Analysis:
    table, failed = cells(run)
    names = [i["name"] for i in run.manifest.get("config", {}).get("instance", [])] or sorted(table)
    a = analyse_table(table, failed, baseline or (names[0] if names else None), [run.manifest],
                      session_flags(run), design([run]), fixed_peak(run))
    a.variants = variants.diffs(run.manifest, a.baseline)
    base_cell = table.get(a.baseline, {}).get(a.peak) if a.peak is not None else None
    control_cfg = run.manifest.get("config", {}).get("control")
    name = control_cfg.get("name") if isinstance(control_cfg, dict) else None
    capped = table.get(name, {}).get(a.peak) if isinstance(name, str) and a.peak is not None else None
    a.control = variants.control(run.manifest, a.changes, vcpu_means(base_cell) if base_cell else None,
                                 idle_vcpus(run, a.baseline), vcpu_means(capped) if capped else None,
                                 vcpu_means(base_cell, waited=True) if base_cell else None
                                 ) if a.baseline == (names[0] if names else None) else None
    records = list(run.records())
    a.host_noise = hostnoise.view(run.manifest, table, records, a.design.block_seconds, a.design.measure_seconds,
                                  a.design.target)
    a.study = studies.view(run.manifest, records, table, a.peak, a.baseline, a.variants, str(run.path / MANIFEST))
    # a study's switch dropped as doing nothing is said once, among the study's answer, not as a warning
    dropped = {a.study.off.get(s, f"no-{s}") for s in a.study.left_out} if a.study is not None else set()
    extra = variants.diff_flags([d for d in a.variants if d.instance not in dropped], a.baseline)
    if a.control is not None and (flag := variants.control_flag(a.control)):
        extra.append(flag)
    a.flags[:0] = extra
    a.load = loadcurve.analyse(records, a.baseline, run.path / RECORDS)
    a.calls = syscalls.view(records, a.baseline, run.path / RECORDS)
    a.work_us = work_per_request(a, idle_vcpus(run, a.baseline))
    # only a cost the run detected is explained
    a.why = syscalls.reasons(a.calls, a.work_us, {n: ch["throughput"].change for n, ch in a.changes.items()
                                                  if ch["throughput"].significant})
    a.profiles = profiles.view(records, a.baseline, run.path, name if isinstance(name, str) else None,
                               flame.found() is not None)
    a.flags += [f for f in [profiles.control_flag(a.profiles)] if f]
    a.switch_why = explain(a.study, records, run.path / RECORDS, a.work_us, a.profiles, a.baseline)
    a.capacity = [r for r in records if r.get("kind") == "capacity"]
    peak = a.peak_interval.mean if a.peak_interval is not None else 0.0
    highest = max((r.requested for r in a.load.rows), default=0.0) if a.load is not None else 0.0
    a.flags += (a.load.flags if a.load is not None else []) + loadcurve.capacity_flags(a.capacity, peak, highest)
    return _under(a, hostdiff.run_flags(run), left_out_line([run]))


def _under(a: Analysis, host: list[str], records: list[str]) -> Analysis:
    """The flags under every figure put first: the host's (its change, the runs' differences), then the
    records left out of every figure; each remembered as such (summary.py ranks them)."""
    a.flags[:0] = host + records
    a.under.update({**dict.fromkeys(records, "records"), **dict.fromkeys(host, "host")})
    return a


def fixed_peak(run: RunDir) -> int | None:
    """The count a run measured its other instances at, when only its baseline swept: with
    sweep.variants = "peak", its load_target's, as written once; in an attribution study under the
    adaptive search, the one count its variants were measured at; None otherwise."""
    config = run.manifest.get("config", {})
    sweep = config.get("sweep", {})
    study = config.get("study", {})
    if isinstance(sweep, dict) and sweep.get("search") == "adaptive" and isinstance(study, dict) \
            and study.get("switches") and isinstance(config.get("instance"), list) and config["instance"]:
        base = config["instance"][0].get("name") if isinstance(config["instance"][0], dict) else None
        counts = {r.get("connections") for r in run.records() if r.get("kind") == "measurement"
                  and r.get("ok") and r.get("instance") != base}
        return next(iter(counts)) if len(counts) == 1 and isinstance(next(iter(counts)), int) else None
    if not isinstance(sweep, dict) or sweep.get("variants") != "peak":
        return None
    count = (load_target(run.records()) or {}).get("connections")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


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
    own = {f: kind for run in runs for f, kind in _own_flags(run, a.flags).items()}
    a.flags[:0] = list(own)
    a.under.update({f: kind for f, kind in own.items() if kind is not None})
    return _under(a, hostdiff.compare_flags(runs), left_out_line(runs))


def _own_flags(run: RunDir, said: list[str]) -> dict[str, str | None]:
    """A run's own report warnings that a comparison does not say itself (it says those of the joint table,
    the records left out and the sessions), named by the run's folder: its control, its loads, its clients'
    capacity, a host that changed under it; each with its kind where it lies under every figure."""
    skip = {*said, *left_out_line([run]), *session_flags(run)}
    own = analyse(run)
    return {f"{run.path.name}: {f}": own.under.get(f) for f in own.flags if f not in skip}


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
                  d: Design | None = None, at: int | None = None) -> Analysis:
    """`at`: where the run measured the other instances (sweep.variants = "peak": the baseline's peak
    as its first iteration fixed it), and so where the changes are read; else the baseline's peak."""
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
    top = stats.peak({c: cell.values() for c, cell in table[base].items()}, LEVEL)
    peak = at if at is not None and at in table[base] else top.at
    if peak != top.at and not top.at_low <= peak <= top.at_high:
        flags.append(f"the others were measured at {peak} connections, where the baseline's first iteration "
                     f"peaked; over all its iterations its peak is at {top.at} ({LEVEL:.0%}: {top.at_low}–"
                     f"{top.at_high}): the changes are not read at its saturation point")
    plausible = [c for c in sorted(curve)
                 if c != top.at and (top.at_low <= c <= top.at_high or _reaches(curve[c], top))]
    cell = table[base][peak]
    peak_flags(manifests, peak, cell, curve, plausible, table, flags, top.at)
    changes = {name: changes_at(cell, by_count[peak], d.block) for name, by_count in table.items()
               if name != base and peak in by_count}
    flags += [f"{name} has no successful point at the baseline's peak ({peak} connections): no change is read "
              "for it" for name in table if name != base and name not in changes]
    split = {name: n for name, by_count in table.items() if (n := noise(by_count, d)) is not None}
    views = exits.views(table, peak, base, manifests)
    return Analysis(base, peak, curve[peak], plausible, changes, flags, table, failed, top, split, d,
                    at_peak=sides.at_peak(cell.sides, server_busy(cell), vcpu_means(cell), curve[peak].mean,
                                          vcpu_means(cell, waited=True)),
                    exits=views, exits_note=exits.note(manifests, views),
                    events=events.views(table, peak, base, d.block))


def work_per_request(a: Analysis, idle: list[float] | None) -> dict[str, float | None]:
    """Each instance's vCPU host time per request at the peak (exits.View's), less the share its guest
    spends without load (timers, samplers: per second, so per request it grows as throughput falls);
    without an idle reading (a run without a control), the whole time."""
    out: dict[str, float | None] = {}
    for e in a.exits:
        busy = vcpu_means(a.cells[e.instance][a.peak]) if a.peak is not None and e.instance in a.cells \
            and a.peak in a.cells[e.instance] else None
        if e.vcpu_us is None or not busy or not idle or len(idle) != len(busy) or sum(busy) <= sum(idle):
            out[e.instance] = e.vcpu_us
        else:
            out[e.instance] = e.vcpu_us * (sum(busy) - sum(idle)) / sum(busy)
    return out


def _reaches(point: Interval, top: Peak) -> bool:
    """A point measured once (the adaptive search's ladder) could be the peak if its one value reaches
    the peak height's interval; without that interval nothing rules it out."""
    return point.n < 2 and (not top.bounded or point.mean >= top.low)
