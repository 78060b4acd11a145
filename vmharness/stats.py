"""The statistics of a run, on scipy and numpy: a handful of iterations per point, noise that is mostly
multiplicative, and boots that differ from each other more than the kernels under test do.

Why these methods (docs/statistics.md has the formulas, tests/unit/test_coverage.py the proof that
a 95% interval holds the truth about 95% of the time):
- a change is a ratio, so its interval is taken on log(variant/baseline) and can never fall below
  -100%; where the runner interleaved the instances, the ratio is taken block by block (a block is an
  iteration: one boot of each instance in `run`, one turn of each at every count in `bench`), which
  cancels what a block shares (drift, the host's state);
- the peak is a maximum over noisy means: where it lies comes from resampling each point's
  iterations, how high it is from every point's own t-like limits with one factor found by redrawing
  the whole curve (a maximum's bootstrap fails near ties: see peak);
- the noise is split between blocks and within a block (Kalibera and Jones' multi-level design) with
  an exact F interval on the share, and the split plans how many boots and measurements per boot a
  target width needs."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from vmharness import student_t

LEVEL = 0.95
POWER = 0.80  # the minimum detectable effect: seen 80% of the time by a test at 1 - LEVEL
RESAMPLES = 2000
SEED = 14  # fixed, so the same run gives the same report
MOST_REPEATS, MOST_BLOCKS = 20, 10_000  # a plan's measurements per block, and its blocks, at most

K = TypeVar("K", bound=Hashable)


def p_value(d: Sequence[float] | np.ndarray) -> float:
    """Two-sided p of a one-sample Student t-test of mean(d) = 0, as scipy.stats.ttest_1samp gives it
    (NaN with fewer than two values; 0 or 1 when every value is the same, to rounding)."""
    a = np.asarray(d, dtype=float)
    if len(a) < 2:
        return math.nan
    mean, se = student_t.mean(a), student_t.sem(a)
    if se <= 1e-12:
        return 0.0 if abs(mean) > 1e-12 else 1.0
    return float(2 * student_t.special().stdtr(len(a) - 1, -abs(mean) / se))


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


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean and its two-sided t-interval; one value has an infinite interval (nothing is known of its
    spread)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(mean, -math.inf, math.inf, n, level)
    half = student_t.quantile(level, n - 1) * student_t.sem(values)
    return Interval(mean, mean - half, mean + half, n, level)


@dataclass(frozen=True)
class Change:
    """other/base as a change (ratio - 1): the ratio of geometric means, its interval (never below -1),
    the smallest change this comparison would have detected, and how it was computed."""

    change: float
    low: float
    high: float
    detectable: float  # minimum detectable effect, as a change: exp(mde) - 1
    n: int
    level: float
    method: str

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.high)

    @property
    def significant(self) -> bool:
        return self.bounded and (self.low > 0 or self.high < 0)


def positive(values: Mapping[K, float] | None) -> dict[K, float]:
    """The values a ratio can use: finite and above zero (a failed point's 0 or a NaN left out)."""
    return {k: float(v) for k, v in (values or {}).items() if math.isfinite(v) and v > 0}


def _mde(se: float, df: float, level: float) -> float:
    return math.expm1((student_t.quantile(level, df) + float(student_t.special().stdtrit(df, POWER))) * se)


def ratio_change(base: Mapping[K, float], other: Mapping[K, float], block: str = "iteration",
                 level: float = LEVEL) -> Change:
    """other/base from values keyed by block. Paired where at least two blocks hold both (a t-interval
    on the mean of log(other_i/base_i)), else Welch's t on the two samples' logs. Values that are not
    positive have no logarithm and are left out."""
    b, o = positive(base), positive(other)
    if not b or not o:
        return Change(math.nan, -1.0, math.inf, math.inf, 0, level, "no positive values: no ratio")
    common = [k for k in b if k in o]
    if len(common) >= 2:
        d = np.log([o[k] / b[k] for k in common])
        n, mean, df = len(d), student_t.mean(d), float(len(d) - 1)
        se = student_t.sem(d)
        left = len(b) + len(o) - 2 * n
        method = f"paired by {block}, t on log ratio, n={n}" + (f" ({left} unpaired left out)" if left else "")
    elif len(b) >= 2 and len(o) >= 2:
        lb, lo = np.log(list(b.values())), np.log(list(o.values()))
        mean = student_t.mean(lo) - student_t.mean(lb)
        vb, vo = student_t.sem(lb) ** 2, student_t.sem(lo) ** 2
        se = math.sqrt(vb + vo)
        # Welch-Satterthwaite degrees of freedom
        df = (vb + vo) ** 2 / (vb**2 / (len(lb) - 1) + vo**2 / (len(lo) - 1)) if se > 0 else 1.0
        n = min(len(b), len(o))
        method = f"unpaired, Welch t on log ratio, n={len(b)} and {len(o)}"
    else:
        mean = math.log(statistics.geometric_mean(o.values()) / statistics.geometric_mean(b.values()))
        return Change(math.expm1(mean), -1.0, math.inf, math.inf, min(len(b), len(o)), level,
                      "one iteration: no interval")
    half = student_t.quantile(level, df) * se
    return Change(math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half), _mde(se, df, level), n, level,
                  method)


@dataclass(frozen=True)
class Peak:
    """Where the highest mean lies (a range of counts) and how high it is."""

    at: int
    at_low: int
    at_high: int
    value: float
    low: float
    high: float
    resamples: int
    seed: int
    level: float

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.high)

    @property
    def relative_half(self) -> float:
        return (self.high - self.low) / 2.0 / self.value if self.value else math.inf


def _heights(means: np.ndarray, sems: np.ndarray, df: np.ndarray, level: float, resamples: int,
             seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The peak height's interval for each row of point means and standard errors (rows are runs, the
    peak's point has a spread): [max_c(m_c - q s_c), m_top + q s_top], q as peak's docstring says."""
    rng = np.random.default_rng([seed, 1])  # a stream of its own: where the peak lies is drawn as before
    z, chi = rng.standard_normal((resamples, len(df))), np.sqrt(rng.chisquare(df, (resamples, len(df))) / df)
    v, top, spread = means.max(-1), means.argmax(-1), sems > 0  # a point without spread is held at its mean
    drawn = np.where(spread[:, None], means[:, None] + sems[:, None] * z, -np.inf)
    d = (drawn - v[:, None, None]) / np.where(spread[:, None], sems[:, None] * chi, 1.0)
    # the smallest q whose interval holds the drawn curve's peak: every lower limit at or under the
    # truth (here the observed top), and the upper limit of the drawn curve's own top at or over it
    need = np.maximum(d.max(-1), -np.take_along_axis(d, drawn.argmax(-1)[..., None], -1)[..., 0])
    alone = np.quantile(np.abs(z[:, top] / chi[:, top]), level, axis=0)  # the top alone, as drawn
    q = np.quantile(need, level, axis=-1) * student_t.special().stdtrit(df[top], 0.5 + level / 2) / alone
    low = (means - q[:, None] * sems).max(-1)
    return np.maximum(0.0, low), v + q * sems[np.arange(len(v)), top]


def peak(cells: Mapping[int, Sequence[float]], level: float = LEVEL, resamples: int = RESAMPLES,
         seed: int = SEED) -> Peak:
    """The count with the highest mean and that mean, each with a bootstrap interval. The count: from
    resampling every point's iterations (percentile interval over the ordered counts). The height: from
    the highest of the points' lower limits m_c - q·s_c (any could be the top; s_c its standard error)
    to the top's own upper one, m_top + q·s_top; q is the `level` quantile of the smallest q that holds
    the peak when the whole curve is redrawn (each mean from its normal, each s_c from its chi-square),
    scaled so that the top alone gets exactly Student's t, as a distinct peak does. Bootstrapping the
    maximum itself fails near ties: its basic interval lay under a rounded top's true height 10% of the time.
    A point with one iteration is left out of the height; a peak point with one iteration has no interval."""
    rng = np.random.default_rng(seed)
    counts = sorted(cells)
    samples = [np.asarray(cells[c], dtype=float) for c in counts]
    means = np.array([student_t.mean(x) for x in samples])
    top = int(means.argmax())
    value = float(means[top])
    if len(samples[top]) < 2:
        return Peak(counts[top], counts[0], counts[-1], value, -math.inf, math.inf, resamples, seed, level)
    tails = ((1 - level) / 2, (1 + level) / 2)
    where = np.column_stack([x[rng.integers(0, len(x), (resamples, len(x)))].mean(axis=1) for x in samples])
    first, last = np.quantile(where.argmax(axis=1), tails, method="inverted_cdf")
    sems = np.array([student_t.sem(x) if len(x) > 1 else 0.0 for x in samples])
    low = high = value  # every iteration of the top alike: nothing to draw from
    if sems[top] > 0:
        df = np.array([max(1, len(x) - 1) for x in samples])
        known = np.where([len(x) > 1 for x in samples], means, -np.inf)  # no spread known: no limits
        low, high = (float(b[0]) for b in _heights(known[None], sems[None], df, level, resamples, seed))
    return Peak(counts[top], counts[min(int(first), top)], counts[max(int(last), top)], value, low, high,
                resamples, seed, level)


@dataclass(frozen=True)
class Split:
    """The variance of log values split between blocks (boots) and within a block, from a blocks x
    counts table: each block's shift shared by all its counts, and what is left."""

    blocks: int
    counts: int
    between: float  # standard deviation of a block's shift, log scale (about a relative spread)
    within: float  # standard deviation of one measurement within a block, log scale
    share: float  # of the variance, between blocks
    share_low: float
    share_high: float
    level: float


def split(table: np.ndarray, level: float = LEVEL) -> Split | None:
    """Two-way analysis of variance without replication on logs: blocks random, counts fixed. The
    interval on the between-block share is exact under normal noise: MS_blocks / MS_residual follows
    (1 + C theta) F(B - 1, (B - 1)(C - 1)), with theta = between^2 / within^2."""
    y = np.log(np.asarray(table, dtype=float))
    blocks, counts = y.shape
    if blocks < 2 or counts < 2 or not np.isfinite(y).all():
        return None
    rows, cols = y.mean(axis=1, keepdims=True), y.mean(axis=0, keepdims=True)
    df_rows, df_res = blocks - 1, (blocks - 1) * (counts - 1)
    ms_rows = counts * float(((rows - y.mean()) ** 2).sum()) / df_rows
    ms_res = float(((y - rows - cols + y.mean()) ** 2).sum()) / df_res
    if ms_res <= 0:
        return None
    between2 = max(0.0, (ms_rows - ms_res) / counts)
    f = ms_rows / ms_res
    tails = [(1 + level) / 2, (1 - level) / 2]
    high_q, low_q = np.asarray(student_t.special().fdtri(df_rows, df_res, tails), dtype=float)
    theta = [max(0.0, (f / float(q) - 1) / counts) for q in (high_q, low_q)]
    return Split(blocks, counts, math.sqrt(between2), math.sqrt(ms_res), between2 / (between2 + ms_res),
                 theta[0] / (1 + theta[0]), theta[1] / (1 + theta[1]), level)


@dataclass(frozen=True)
class Plan:
    blocks: int
    repeats: int  # measurements of each count within one block
    seconds: float


@functools.lru_cache(maxsize=4)
def blocks_t(level: float) -> tuple[np.ndarray, np.ndarray]:
    """Every block count a plan may choose and its t quantile at `level`, computed once (10 ms)."""
    b = np.arange(2, MOST_BLOCKS + 1)
    return b, student_t.special().stdtrit(b - 1, 0.5 + level / 2)


def plan(s: Split, target: float, block_seconds: float, measure_seconds: float, level: float = LEVEL) -> Plan | None:
    """The cheapest blocks x repeats whose t-interval on one point's mean is within +-target:
    t(B - 1) * sqrt((between^2 + within^2 / R) / B) <= log(1 + target), cost B * (boot + R * measurement)
    (Kalibera and Jones: more repeats pay only while a block is dear and its shift small). None when
    not within MOST_BLOCKS x MOST_REPEATS."""
    width = math.log1p(target)
    b, t = blocks_t(level)
    best: Plan | None = None
    for r in range(1, MOST_REPEATS + 1):
        ok = t * np.sqrt((s.between ** 2 + s.within ** 2 / r) / b) <= width
        if ok.any():
            n = int(b[ok.argmax()])
            cost = n * (block_seconds + r * measure_seconds)
            if best is None or cost < best.seconds:
                best = Plan(n, r, cost)
    return best
