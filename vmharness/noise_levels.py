"""The noise of a run that goes round host boots, in its three levels: the host boot (a kexec: where the
kernel put itself, page placement, interrupt routing, frequency), the guest boot within it, and one
measurement within a guest boot. Kalibera and Jones' multi-level design: each level's variance is
estimated from the level below it, and the cheapest plan repeats the level whose repetition narrows
the interval most per second spent.

The data: host boots x instances x counts of log throughput, one guest boot of each instance in each
host boot (the run's rounds: experiment/hostboots/plan.py). One instance's guest boots alone cannot
tell their host boot's shift from their own, since each host boot holds one of them; the instances
measured in the same host boot can: what they share is the host boot's, what they do not is their own.
The model, on logs: y[h, i, c] = m[i, c] + H[h] + G[h, i] + e[h, i, c], the instances and counts fixed,
H, G and e random with variances host^2, guest^2 and within^2 (alike for every instance).

- within^2: each instance's host boots x counts table, two-way without replication (stats.split), its
  residual mean square; pooled over the instances (equal degrees of freedom: their mean);
- host^2 and the guest boot's mean's variance guest^2 + within^2 / C: stats.split of the guest boots'
  means (host boots x instances), with its exact F interval on the host boots' share of that variance;
- guest^2 = that variance less within^2 / C, never below zero.

The plan: a point's mean over H host boots, G guest boots in each and R measurements in each has the
variance host^2 / H + guest^2 / (H G) + within^2 / (H G R); its t interval (H - 1 degrees of freedom:
the host boots are the units at the top) is within +-target for the cheapest H x (switch + G x (boot +
R x measurement)). Only more host boots narrow the host boot's part: `floor` says how far those the
run made can go, whatever is repeated below them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vmharness import stats
from vmharness.stats import LEVEL, MOST_REPEATS, Split


@dataclass(frozen=True)
class Levels:
    host_boots: int
    instances: int  # measured in each host boot: one guest boot each
    counts: int
    host: float  # standard deviation of a host boot's shift, log scale (about a relative spread)
    guest: float  # of a guest boot's shift within its host boot
    within: float  # of one measurement within a guest boot
    boots: Split  # the guest boots' means split between host boots: its share and exact interval
    level: float

    def shares(self) -> tuple[float, float, float]:
        """Of one measurement's variance: the host boot's, the guest boot's and its own."""
        parts = (self.host ** 2, self.guest ** 2, self.within ** 2)
        total = sum(parts)
        return (0.0, 0.0, 1.0) if total == 0 else (parts[0] / total, parts[1] / total, parts[2] / total)


def split(table: np.ndarray, level: float = LEVEL) -> Levels | None:
    """The three levels of a host boots x instances x counts table of throughputs (positive); None
    where a level cannot be told: fewer than two host boots, two instances sharing them or two counts."""
    y = np.asarray(table, dtype=float)
    if y.ndim != 3 or min(y.shape) < 2 or not (np.isfinite(y).all() and (y > 0).all()):
        return None
    hosts, instances, counts = y.shape
    per_instance = [stats.split(y[:, i, :], level) for i in range(instances)]
    boots = stats.split(np.exp(np.log(y).mean(axis=2)), level)
    if boots is None or any(s is None for s in per_instance):
        return None
    within2 = float(np.mean([s.within ** 2 for s in per_instance if s is not None]))
    guest2 = max(0.0, boots.within ** 2 - within2 / counts)
    return Levels(hosts, instances, counts, boots.between, math.sqrt(guest2), math.sqrt(within2), boots, level)


@dataclass(frozen=True)
class Plan:
    host_boots: int
    guest_boots: int  # in each host boot, of the instance
    repeats: int  # measurements of each count in each guest boot
    seconds: float  # for one point: switches, boots and measurements


def plan(v: Levels, target: float, switch_seconds: float, boot_seconds: float, measure_seconds: float,
         level: float = LEVEL) -> Plan | None:
    """The cheapest host boots x guest boots x measurements whose t interval on one point's mean is
    within +-target; None when not within stats.MOST_BLOCKS host boots and MOST_REPEATS of each below."""
    width = math.log1p(target)
    h, t = stats.blocks_t(level)
    best: Plan | None = None
    for g in range(1, MOST_REPEATS + 1):
        for r in range(1, MOST_REPEATS + 1):
            ok = t * np.sqrt((v.host ** 2 + v.guest ** 2 / g + v.within ** 2 / (g * r)) / h) <= width
            if ok.any():
                n = int(h[ok.argmax()])
                cost = n * (switch_seconds + g * (boot_seconds + r * measure_seconds))
                if best is None or cost < best.seconds:
                    best = Plan(n, g, r, cost)
    return best


def floor(v: Levels, level: float = LEVEL) -> float:
    """The narrowest +-relative interval on a point's mean that v.host_boots host boots allow, however many
    guest boots and measurements each holds: the host boots' own part, t(H - 1) x host / sqrt(H)."""
    h, t = stats.blocks_t(level)
    return math.expm1(float(t[h == v.host_boots][0]) * v.host / math.sqrt(v.host_boots))
