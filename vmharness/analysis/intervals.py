"""The interval of a rate or a latency at one point: a geometric mean with a t-interval made on the
logarithms, so that neither limit is ever below zero (a rate or a latency never is), as the changes
already are (stats.ratio_change). With fewer than MIN_N values it is not given: with two, the t factor
(12.7) makes an interval as wide as several orders of magnitude, which says nothing; the forms write
TOO_FEW in its place."""

from __future__ import annotations

import math

from vmharness.stats import LEVEL, Interval, mean_interval

MIN_N = 3
TOO_FEW = "too few iterations"


def log_interval(values: list[float], level: float = LEVEL) -> Interval:
    """The geometric mean of the positive values and its t-interval on their logarithms; the limits
    infinite (not given) with fewer than MIN_N of them, NaN throughout with none."""
    logs = [math.log(v) for v in values if math.isfinite(v) and v > 0]
    if not logs:
        return Interval(math.nan, math.nan, math.nan, 0, level)
    x = mean_interval(logs, level)
    if x.n < MIN_N:
        return Interval(math.exp(x.mean), -math.inf, math.inf, x.n, level)
    return Interval(math.exp(x.mean), math.exp(x.low), math.exp(x.high), x.n, level)


def span(x: Interval) -> str:
    """An interval's limits as the tables print them, or why there are none."""
    if math.isnan(x.mean):
        return "-"
    return f"{x.low:,.0f}-{x.high:,.0f}" if math.isfinite(x.low) else TOO_FEW
