"""How many rounds (in a run: boots) the adaptive search spends at its peak, and how many measurements
each round takes there: planned from the noise split of a pilot round, not found by stopping when the
interval happens to look narrow.

After the ladder (round 0), round 1 is the pilot: the baseline measured again at the focus and at its
measured neighbours. Those two rounds x those counts split the noise between rounds and within one
(stats.split, the report's own split), and stats.plan gives the cheapest rounds x measurements whose
interval reaches the target, a round costing what the run's boots cost (their session records; nothing
in a bench, where a round is free and one measurement per round is always best) and a measurement
sweep.duration + sweep.wait. This is a two-stage design (Stein's: a pilot fixes the sample size). How
many values a point gets no longer depends on how narrow its own interval looks, which is what made
the sequential rule's intervals cover less (search.SEQUENTIAL_MINIMUM).

When the target is out of reach within sweep.max_iterations rounds (under TCG, boots differ by about
12% and measurements within one by 2-3%: +-2% would take some 140 boots), chasing it would spend every
round the cap allows and still miss. The search then spends sweep.iterations rounds, what the grid would
have spent, each with the measurements that narrow the interval most per second, and says so.

Why by hand: the plan is the textbook cost model of a two-level design (Kalibera and Jones); no library
plans repeated benchmark runs from records a resumed run must read again."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vmharness import stats
from vmharness.model.sections import BenchConfig

TARGET = 0.02  # the peak's relative interval width, unless sweep.until_ci names one
PILOT = 1  # the round that measures the focus's neighbours again


@dataclass(frozen=True)
class Budget:
    rounds: int  # at the focus, the ladder's round and the pilot included
    repeats: int  # measurements of each instance at the focus in each round after the pilot
    split: stats.Split
    reached: bool  # whether that many rounds reach the target
    target: float

    @property
    def values(self) -> int:
        """The measurements each instance gets at the focus: one in each round up to the pilot, then
        `repeats` in each."""
        return min(self.rounds, PILOT + 1) + max(0, self.rounds - PILOT - 1) * self.repeats

    def line(self, block: str) -> str:
        noise = (f"{block}s differ by {self.split.between:.1%}, measurements within one by "
                 f"{self.split.within:.1%}")
        per = f"{self.rounds} {block}s of {self.repeats} measurement{'s' if self.repeats > 1 else ''} at the peak"
        if self.reached:
            return f"the pilot {block}: {noise}; {per} reach ±{self.target:.1%}"
        return (f"the pilot {block}: {noise}; ±{self.target:.1%} at the peak is out of reach within "
                f"sweep.max_iterations, so {per} (sweep.iterations), each measured as often as pays")


def pilot_counts(seen: list[int], focus: int) -> list[int]:
    """The counts the pilot measures again: the focus and its measured neighbours."""
    i = seen.index(focus)
    return seen[max(0, i - 1):i + 2]


def efficient_repeats(s: stats.Split, block_seconds: float, measure_seconds: float) -> int:
    """The measurements per round that narrow a mean's interval most per second spent: the least
    (between^2 + within^2 / R) x (block + R x measurement)."""
    cost = [(s.between ** 2 + s.within ** 2 / r) * (block_seconds + r * measure_seconds)
            for r in range(1, stats.MOST_REPEATS + 1)]
    return next(r for r, c in enumerate(cost, 1) if c <= min(cost) * (1 + 1e-9))  # the fewest, on ties


def block_seconds(records: Iterable[dict[str, Any]]) -> float:
    """What a round costs beyond its measurements: the mean boot of a run's sessions, 0 in a bench."""
    boots = [float(r["boot_seconds"]) for r in records if r.get("kind") == "session" and r.get("ok")
             and isinstance(r.get("boot_seconds"), int | float)]
    return statistics.fmean(boots) if boots else 0.0


def plan(cfg: BenchConfig, records: list[dict[str, Any]], pilot: list[int]) -> Budget | None:
    """The budget, once the baseline's pilot round has tried every count of `pilot` (pilot_counts of
    round 0's best); None before, and when the counts measured in both rounds are too few to split
    their noise (the search then stops by search.more_iterations)."""
    base = cfg.instance[0].name
    rows: dict[int, dict[int, list[float]]] = {}
    tried = set()
    for r in records:
        if r.get("kind") == "measurement" and r["instance"] == base and r["iteration"] <= PILOT:
            tried.add((r["iteration"], r["connections"]))
            if r.get("ok"):
                rows.setdefault(r["iteration"], {}).setdefault(r["connections"], []).append(
                    float(r["client"]["requests_per_s"]))
    if not pilot or any((PILOT, c) not in tried for c in pilot) or len(rows) < 2:
        return None
    shared = sorted(set(rows[0]) & set(rows[PILOT]))
    table = np.array([[statistics.fmean(rows[b][c]) for c in shared] for b in (0, PILOT)], dtype=float)
    found = stats.split(table) if len(shared) >= 2 and (table > 0).all() else None
    if found is None:
        return None
    s = cfg.sweep
    target = s.until_ci or TARGET
    block, measure = block_seconds(records), s.duration + s.wait
    least = min(max(s.iterations, PILOT + 1), s.max_iterations)
    best = stats.plan(found, target, block, measure)
    if best is not None and best.blocks <= s.max_iterations:
        return Budget(max(best.blocks, least), best.repeats, found, True, target)
    return Budget(least, efficient_repeats(found, block, measure), found, False, target)
