"""The points at the baseline's peak that follow a sweep: its target (the baseline's highest mean,
written once; record_check.load_target), the others' points there when only the baseline sweeps, the open-loop
load's points at load.percents of it, and the points that explain a cost (bench/explained.py: the
counted and the profiled). Derived from the run's records alone, as the
sweep's own (plan.py), so that `--resume` takes up where a run stopped."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from vmharness.bench.plan import Point, dropped, measurements, order
from vmharness.model.derived import counts_syscalls, explains, loaded, profiles
from vmharness.model.sections import BenchConfig
from vmharness.rundir.record_check import load_target


def new_target(cfg: BenchConfig, records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The load's target from the sweep so far: the baseline's count with the highest mean requests/s,
    and load.percents of that mean. Fixed once written, so that every instance and iteration (and a
    resumed run) is loaded at the same rates; in a run that is after the baseline's first boot. None
    without a load to measure (or system calls to count there), or before the baseline has a successful
    point."""
    if not (cfg.load.percents or explains(cfg) or cfg.sweep.variants == "peak"):
        return None
    records = list(records)
    base = cfg.instance[0].name
    values: dict[int, list[float]] = {}
    for r in measurements(records):
        if r["instance"] == base and r.get("ok"):
            values.setdefault(r["connections"], []).append(float(r["client"]["requests_per_s"]))
    if not values:
        return None
    means = {c: statistics.fmean(v) for c, v in values.items()}
    top = min(means, key=lambda c: (-means[c], c))
    return {"kind": "load_target", "instance": base, "connections": top, "requests_per_s": means[top],
            "iterations": len(values[top]), "rates": {str(p): means[top] * p / 100 for p in cfg.load.percents},
            "from": f"the baseline's highest mean, {len(values[top])} iteration(s) at {top} connections"}


def peak_points(cfg: BenchConfig, records: Iterable[dict[str, Any]], iteration: int | None = None) -> list[Point]:
    """With sweep.variants = "peak": every instance but the baseline at the target's count, in iterations
    0..sweep.iterations-1 (or just `iteration`), not yet measured successfully; none before the target
    (the baseline's boot that fixes it measures its riders' there right after)."""
    records = list(records)
    target = load_target(records)
    if cfg.sweep.variants != "peak" or target is None:
        return []
    done = {r["key"] for r in measurements(records) if r.get("ok")}
    gone, base = dropped(records), cfg.instance[0].name
    its = range(cfg.sweep.iterations) if iteration is None else [iteration]
    return [p for it in its for n in order(cfg, it) if n != base and n not in gone
            if (p := Point(it, int(target["connections"]), n)).key not in done]


def load_points(cfg: BenchConfig, records: Iterable[dict[str, Any]], iteration: int | None = None) -> list[Point]:
    """The open-loop points not yet measured successfully: each loaded instance at each percentage, in
    iterations 0..sweep.iterations-1 (or just `iteration`), the instances rotated as the sweep's; none
    before the target is written."""
    records = list(records)
    target = load_target(records)
    if target is None:
        return []
    done = {r["key"] for r in records if r.get("kind") == "load" and r.get("ok")}
    names = [n for n in loaded(cfg) if n not in dropped(records)]
    its = range(cfg.sweep.iterations) if iteration is None else [iteration]
    return [p for it in its for n in order(cfg, it) if n in names for pct in cfg.load.percents
            if (p := Point(it, int(target["connections"]), n, pct)).key not in done]


def counted_points(cfg: BenchConfig, records: Iterable[dict[str, Any]], iteration: int | None = None) -> list[Point]:
    """With [explain] syscalls: one point per instance and iteration at the load target's count (the
    baseline's peak, fixed once written), whose system calls are counted; none before the target."""
    records = list(records)
    target = load_target(records)
    if not counts_syscalls(cfg) or target is None:
        return []
    done = {r["key"] for r in records if r.get("kind") == "syscalls" and r.get("ok")}
    gone = dropped(records)
    its = range(cfg.sweep.iterations) if iteration is None else [iteration]
    return [p for it in its for n in order(cfg, it) if n not in gone
            if (p := Point(it, int(target["connections"]), n, counted=True)).key not in done]


def profiled_points(cfg: BenchConfig, records: Iterable[dict[str, Any]], iteration: int | None = None) -> list[Point]:
    """With [explain] profile: one point per instance at the load target's count whose server is
    profiled, in the first iteration (of those asked) where it has neither a profile nor a try at one."""
    records = list(records)
    target = load_target(records)
    if not profiles(cfg) or target is None:
        return []
    tried = {(r.get("instance"), r.get("iteration")) for r in records if r.get("kind") == "profile"}
    done = {r.get("instance") for r in records if r.get("kind") == "profile" and r.get("ok")}
    gone = dropped(records)
    its = range(cfg.sweep.iterations) if iteration is None else [iteration]
    out: list[Point] = []
    for it in its:
        out += [Point(it, int(target["connections"]), n, profiled=True) for n in order(cfg, it)
                if n not in gone and n not in done and (n, it) not in tried and n not in {p.instance for p in out}]
    return out


def after_sweep(cfg: BenchConfig, records: Iterable[dict[str, Any]], iteration: int | None = None) -> list[Point]:
    """What follows the sweep at the baseline's peak: the others' points there (sweep.variants = "peak",
    in the boot that fixes it), the open-loop load's points, then the counted ones, then the profiled."""
    records = list(records)
    return (peak_points(cfg, records, iteration) + load_points(cfg, records, iteration)
            + counted_points(cfg, records, iteration) + profiled_points(cfg, records, iteration))
