"""Which points a sweep measures: the fixed grid (every count of sweep.connections, each iteration,
and more iterations where sweep.until_ci asks for them), or the adaptive search (sweep.search =
"adaptive": vmharness/bench/search.py's ladder and refinement on the baseline, then iterations only
at its peak). Both are derived from the run's records alone, so `--resume` takes up where a run
stopped and a guest session can ask again after each point what is left."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vmharness.bench import budget, search
from vmharness.model import derived, sections
from vmharness.model.sections import BenchConfig
from vmharness.rundir.record_check import load_target


@dataclass(frozen=True)
class Point:
    iteration: int
    connections: int
    instance: str
    percent: int = 0  # > 0: an open-loop point at this percentage of the baseline's peak (load_points)
    counted: bool = False  # a point at the baseline's peak whose server's system calls are counted
    profiled: bool = False  # a point at the baseline's peak during which the server's CPUs are profiled
    repeat: int = 0  # > 0: a further measurement of the same point in the same round (bench/budget.py)

    @property
    def key(self) -> str:
        if self.repeat:
            return f"{self.instance}/{self.connections}/{self.iteration}/r{self.repeat}"
        if self.percent:
            return f"{self.instance}/@{self.percent}%/{self.iteration}"
        if self.counted:
            return f"{self.instance}/syscalls/{self.iteration}"
        if self.profiled:
            return f"{self.instance}/profile/{self.iteration}"
        return f"{self.instance}/{self.connections}/{self.iteration}"


def order(cfg: BenchConfig, iteration: int) -> list[str]:
    """The instances in the order of an iteration: rotated each time, so none is always first."""
    names = [i.name for i in cfg.instance]
    k = iteration % len(names)
    return names[k:] + names[:k]


def at_peak_only(cfg: BenchConfig) -> bool:
    """Only the baseline sweeps, the others are measured at its peak: sweep.variants = "peak", or an
    attribution study under the adaptive search."""
    return cfg.sweep.variants == "peak" or (cfg.sweep.search == "adaptive" and _study(cfg) is not None)


def _swept(cfg: BenchConfig, name: str, count: int, target: int | None) -> bool:
    """Whether the grid measures instance `name` at `count`: every one at every count, or with
    sweep.variants = "peak" the baseline at every count and the others at the `target` alone."""
    return cfg.sweep.variants != "peak" or name == cfg.instance[0].name or count == target


def points(cfg: BenchConfig, target: int | None = None) -> list[Point]:
    """The grid's measurement order (with sweep.variants = "peak", the others at `target`: before it is
    known, the baseline alone)."""
    out = []
    for it in range(cfg.sweep.iterations):
        names = order(cfg, it)
        if derived.interleave(cfg) == "point":
            out += [Point(it, c, n) for c in cfg.counts for n in names if _swept(cfg, n, c, target)]
        else:
            out += [Point(it, c, n) for n in names for c in cfg.counts if _swept(cfg, n, c, target)]
    return out


def planned(cfg: BenchConfig) -> int | None:
    """How many points the sweep plans at its start: the grid's and the open-loop load's; None for the
    adaptive search, which decides as it goes."""
    load = len(derived.loaded(cfg)) * len(cfg.load.percents) * cfg.sweep.iterations
    counted = len(cfg.instance) * cfg.sweep.iterations if derived.counts_syscalls(cfg) else 0
    profiled = len(cfg.instance) if derived.profiles(cfg) else 0
    return len(points(cfg, cfg.counts[0])) + load + counted + profiled if cfg.sweep.search == "grid" else None


def measurements(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "measurement"]


def unsettled(cfg: BenchConfig, records: Iterable[dict[str, Any]]) -> list[Point]:
    """With sweep.until_ci: the next iteration of every grid point whose 95% t-interval is still wider
    than ± until_ci of its mean (PTS's way), until max_iterations (the rule: stop_rule)."""
    s = cfg.sweep
    if s.until_ci <= 0:
        return []
    rps: dict[tuple[str, int], list[float]] = {}
    tried: dict[tuple[str, int], int] = {}
    for r in measurements(records):
        cell = (r["instance"], r["connections"])
        tried[cell] = max(tried.get(cell, 0), r["iteration"] + 1)
        if r.get("ok"):
            rps.setdefault(cell, []).append(float(r["client"]["requests_per_s"]))
    out = []
    target = load_target(records)
    at = int(target["connections"]) if target is not None else None
    for c in cfg.counts:
        for inst in (i.name for i in cfg.instance if _swept(cfg, i.name, c, at)):
            values, done = rps.get((inst, c), []), tried.get((inst, c), 0)
            if done >= s.max_iterations:
                continue
            if search.more_iterations(values, s.until_ci, *stop_rule(cfg)):
                out.append(Point(done, c, inst))
    return out


def stop_rule(cfg: BenchConfig) -> tuple[int, int]:
    """(minimum, cap) of a point's iterations when they stop on its interval's width: at least
    sweep.iterations, and never fewer than search.SEQUENTIAL_MINIMUM (an interval that decided when to
    stop covers less often), at most max_iterations."""
    s = cfg.sweep
    return min(max(s.iterations, search.SEQUENTIAL_MINIMUM), s.max_iterations), s.max_iterations


def spec(cfg: BenchConfig) -> search.Spec:
    """The search's ladder spans sweep.connections: from its smallest count to its largest."""
    counts = cfg.counts
    return search.Spec(start=min(counts), limit=max(counts), factor=cfg.sweep.search_factor,
                       resolution=cfg.sweep.search_resolution)


def curve(cfg: BenchConfig, records: Iterable[dict[str, Any]]) -> dict[int, float]:
    """The baseline's first iteration, count by count: what the search has seen. A count whose point
    failed after its retries stands at 0 (nothing was served), so the search never asks for it again."""
    base = cfg.instance[0].name
    out: dict[int, float] = {}
    for r in measurements(records):
        if r["instance"] == base and r["iteration"] == 0:
            out[r["connections"]] = float(r["client"]["requests_per_s"]) if r.get("ok") else 0.0
    return out


def adaptive(cfg: BenchConfig, records: Iterable[dict[str, Any]]) -> list[Point]:
    """What the adaptive search measures next. While the search goes on: every instance at its next
    count (iteration 0; in a run, the baseline's boot walks the ladder and the others follow in theirs).
    Once the peak is located: every instance at every count the search measured, then the pilot round
    (the baseline also at the measured counts beside its highest mean), then further rounds of every
    instance at that highest mean, as many and each with as many measurements as bench/budget.py plans
    from the pilot's noise split (or, when it cannot be split, while any instance's interval there is
    wider than the target: stop_rule). Points already tried (even if they failed) are not offered
    again. With an attribution study ([study]), only the baseline walks the ladder and the other
    instances are measured at its highest mean alone: the point where the cost is read."""
    s = cfg.sweep
    records = list(records)
    measured = measurements(records)
    tried = {r["key"] for r in measured}
    gone = dropped(records)

    def turn(k: int) -> list[str]:  # the iteration's turn, less the instances dropped
        return [n for n in order(cfg, k) if n not in gone]

    seen = curve(cfg, measured)
    base = cfg.instance[0].name
    walk = [base] if at_peak_only(cfg) else [i.name for i in cfg.instance]
    if derived.interleave(cfg) == "point":  # every instance at a count before the search goes on
        behind = [p for c in sorted(seen) for n in turn(0) if n in walk
                  and (p := Point(0, c, n)).key not in tried]
        if behind:
            return behind
    following = search.next_count(seen, spec(cfg))
    if following is not None:
        return [p for n in turn(0) if n in walk and (p := Point(0, following, n)).key not in tried]
    first = [Point(0, c, n) for n in turn(0) if n in walk for c in sorted(seen)]
    if left := [p for p in first if p.key not in tried]:
        return left
    values: dict[tuple[str, int], list[float]] = {}
    rounds: dict[int, set[int]] = {}  # count -> the rounds tried there
    for r in measured:
        rounds.setdefault(r["connections"], set()).add(r["iteration"])
        if r.get("ok"):
            values.setdefault((r["instance"], r["connections"]), []).append(float(r["client"]["requests_per_s"]))
    means = {c: statistics.fmean(values[(base, c)]) for c in seen if (base, c) in values}
    if not means:
        return []
    # The count with the highest mean gets the rounds. A ladder point measured once may be there by
    # luck; its further rounds then bring its mean down and the focus back, where it already stopped.
    focus = min(means, key=lambda c: (-means[c], c))
    # once a study's variants are measured at the baseline's peak, it stays where they are (the pilot's
    # second values beside it may now be higher): their rounds are paired there, where the report reads them
    if (study := _study(cfg)) is not None and not study.neighbours:
        focus = next((r["connections"] for r in measured if r["instance"] not in walk), focus)
    near = _near(cfg, sorted(seen), focus)
    planned = planned_budget(cfg, records)
    repeats = planned.repeats if planned is not None else 1

    def round_of(k: int, c: int) -> list[Point]:  # a round's points at a count: after the pilot, repeated,
        # once the count has had its rounds up to the pilot's (a focus that moved to a count measured once
        # takes its second value alone, as the pilot would have given it, before a round of repeats)
        names = [n for n in turn(k) if n in walk or c in near]
        had = sum(j < k for j in rounds.get(c, ()))
        times = repeats if k > budget.PILOT and had > budget.PILOT else 1
        return [Point(k, c, n, repeat=j) for j in range(times) for n in names]

    # a round begun at a count is finished first: every instance (a study's: at the focus, and its
    # neighbours if asked) has the same rounds there
    for c, its in sorted(rounds.items()):
        for k in sorted(its):
            if left := [p for p in round_of(k, c) if p.key not in tried]:
                return left
    pilot = _pilot(seen)  # the round that also measures the baseline beside round 0's best
    if any(budget.PILOT in its for its in rounds.values()) and (
            left := [p for c in pilot for p in round_of(budget.PILOT, c) if p.key not in tried]):
        return left  # a pilot begun is finished at all its counts, whatever the focus is now
    # Its next round is the latest one, after the pilot, when it has none there yet: in a run the round
    # is the boot that is up, and going back to a round it lacks would boot that round's guest again.
    latest = max(max(its) for its in rounds.values())
    k = latest if latest > budget.PILOT and latest not in rounds[focus] else max(rounds[focus]) + 1
    counts = near
    if planned is None and k == budget.PILOT:
        counts = sorted(set(near) | set(pilot))
    elif (len(rounds[focus]) >= planned.rounds) if planned is not None else (
            len(rounds[focus]) >= s.max_iterations or not any(
                search.more_iterations(values.get((n, focus), []), s.until_ci or budget.TARGET, *stop_rule(cfg))
                for n in turn(0))):
        return []
    return [p for c in counts for p in round_of(k, c) if p.key not in tried]


def _pilot(seen: dict[int, float]) -> list[int]:
    """The counts of the pilot round: round 0's best and its measured neighbours."""
    return budget.pilot_counts(sorted(seen), search.peak_count(seen)) if seen else []


def planned_budget(cfg: BenchConfig, records: list[dict[str, Any]]) -> budget.Budget | None:
    """The adaptive search's rounds and repeats at its peak, once its pilot is measured (bench/budget.py)."""
    return budget.plan(cfg, records, _pilot(curve(cfg, measurements(records))))


def _study(cfg: BenchConfig) -> sections.StudySection | None:
    """A run's attribution study, if it has one (a bench configuration never has)."""
    return cfg.study if isinstance(cfg, sections.RunConfig) and cfg.study.switches else None


def _near(cfg: BenchConfig, seen: list[int], focus: int) -> list[int]:
    """Where further rounds go: the focus, and with a study's `neighbours` the measured counts beside it."""
    study = _study(cfg)
    if study is None or not study.neighbours:
        return [focus]
    i = seen.index(focus)
    return seen[max(0, i - 1):i + 2]


def dropped(records: Iterable[dict[str, Any]]) -> set[str]:
    """The instances a run dropped before measuring them (a study's switch that changed nothing)."""
    return {str(r.get("instance")) for r in records if r.get("kind") == "dropped"}


def after_round(cfg: BenchConfig, records: Iterable[dict[str, Any]]) -> tuple[list[Point], str | None]:
    """What a sweep (or a run) measures after a round: the adaptive search's next points, or the grid's:
    with sweep.variants = "peak", those not yet tried (the others' at the baseline's peak, once its
    first iteration has fixed it), then the points whose interval is still wider than until_ci, with the
    line that says so."""
    records = list(records)
    if cfg.sweep.search == "adaptive":
        todo, planned = adaptive(cfg, records), planned_budget(cfg, records)
        begins = todo and planned and not any(r["iteration"] > budget.PILOT for r in measurements(records))
        block = "boot" if isinstance(cfg, sections.RunConfig) else "round"
        return todo, planned.line(block) if begins and planned else None
    if cfg.sweep.variants == "peak" and (left := _grid(cfg, records, {r["key"] for r in measurements(records)})):
        return left, None
    more = [p for p in unsettled(cfg, records) if p.instance not in dropped(records)]
    return more, (f"{len(more)} points not yet within ±{cfg.sweep.until_ci:.2%}: more iterations" if more else None)


def _grid(cfg: BenchConfig, records: list[dict[str, Any]], done: set[str]) -> list[Point]:
    """The grid's points not in `done`, none of an instance dropped. With sweep.variants = "peak" and
    the baseline's peak not yet fixed, the baseline's first iteration with such points alone: the
    round after it measures the others there."""
    gone = dropped(records)
    target = load_target(records)
    left = [p for p in points(cfg, int(target["connections"]) if target is not None else None)
            if p.key not in done and p.instance not in gone]
    if cfg.sweep.variants == "peak" and target is None and left:
        return [p for p in left if p.iteration == left[0].iteration]
    return left


def todo(cfg: BenchConfig, records: Iterable[dict[str, Any]], done: set[str]) -> list[Point]:
    """The points a sweep or run starts with: the grid's not yet measured successfully (or its
    unsettled ones), or the adaptive search's next; none of an instance dropped."""
    records = list(records)
    if cfg.sweep.search == "adaptive":
        return adaptive(cfg, records)
    return _grid(cfg, records, done) or [p for p in unsettled(cfg, records) if p.instance not in dropped(records)]

