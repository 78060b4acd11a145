"""Confidence intervals for a handful of iterations: Student's t, two-sided, from the t distribution
itself (its CDF through the regularized incomplete beta function, inverted by bisection), so that
three iterations get the wide interval they deserve rather than a normal approximation's."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _ibeta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _ibeta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t value below which a fraction p of the distribution lies."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int
    level: float

    @property
    def half(self) -> float:
        return (self.high - self.low) / 2.0

    @property
    def relative_half(self) -> float:
        return self.half / abs(self.mean) if self.mean else math.inf

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


def mean_interval(values: list[float], level: float = 0.95) -> Interval:
    """Mean and its two-sided t-interval; one value gives an interval of nothing but that value's
    uncertainty: infinite."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(mean, -math.inf, math.inf, n, level)
    half = t_quantile(0.5 + level / 2.0, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, level)


def change_interval(base: list[float], other: list[float], level: float = 0.95) -> Interval:
    """(mean(other) - mean(base)) / mean(base), with Welch's t-interval on the difference scaled by
    the base mean (the base mean's own uncertainty in the denominator is not propagated)."""
    mb, mo = statistics.fmean(base), statistics.fmean(other)
    change = (mo - mb) / mb
    if len(base) < 2 or len(other) < 2:
        return Interval(change, -math.inf, math.inf, min(len(base), len(other)), level)
    vb, vo = statistics.variance(base) / len(base), statistics.variance(other) / len(other)
    se = math.sqrt(vb + vo)
    if se == 0:
        return Interval(change, change, change, min(len(base), len(other)), level)
    df = (vb + vo) ** 2 / ((vb * vb) / (len(base) - 1) + (vo * vo) / (len(other) - 1))
    half = t_quantile(0.5 + level / 2.0, df) * se / mb
    return Interval(change, change - half, change + half, min(len(base), len(other)), level)
