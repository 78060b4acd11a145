"""A point's latency distribution: every request's latency in whole microseconds, as wrk counts them.

wrk keeps an exact count per microsecond (one array slot per microsecond up to its timeout), so the
distribution of a point is known exactly, and the distribution of several clients is the sum of
their counts: a percentile of the merged histogram is the percentile of all requests together. The
maximum of each client's percentile, which the report used before, is not that: it overstates the
tail whenever one client is slower. HdrHistogram's log-linear buckets would make the records a
little smaller at the price of a 0.1% rounding; exact microseconds merged by numpy need no library.

The histogram is wrk's own, after its coordinated-omission correction (for each response slower
than twice the mean time between one connection's requests, wrk adds the requests a fixed schedule
would have sent meanwhile), so that its percentiles are the ones wrk prints.

Stored as runs of consecutive microseconds, `[[first_us, count, count, ...], ...]`; a run carries
up to GAP empty microseconds rather than start a new one. report.lua writes the same shape.

Percentiles are numpy's "inverted_cdf": the smallest latency that at least q% of requests did not
exceed. A percentile with fewer than MIN_BEYOND requests beyond it rests on a handful of requests,
and the report marks it as such (`supported`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

PERCENTILES = ("50", "75", "90", "99", "99.9", "99.99")  # the keys of a record's latency_us.percentiles
MIN_BEYOND = 10  # requests beyond a percentile for it to count as measured
GAP = 3  # empty microseconds a run carries before a new run starts (each costs 2 bytes, a new run ~10)
MOST_US = 10**10  # a latency beyond this (about 2.8 h) is not a wrk measurement: the record is damaged
MOST_COUNT = 2**53  # counts are exact in a JSON number up to here

Ints = npt.NDArray[np.int64]


def _rank(q: str | float, n: int) -> int:
    """The 1-based rank of the q-th percentile among n requests, exactly (no float rounding):
    ceil(q/100 * n), at least 1."""
    return max(1, math.ceil(Fraction(str(q)) * n / 100))


def supported(q: str | float, n: int) -> bool:
    """Whether n requests put at least MIN_BEYOND of them beyond the q-th percentile."""
    return n > 0 and n - _rank(q, n) >= MIN_BEYOND


@dataclass(frozen=True)
class Histogram:
    values: Ints  # distinct latencies, microseconds, ascending
    counts: Ints  # requests at each, all positive

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def percentile(self, q: str | float) -> int:
        """The q-th percentile (inverted CDF): the smallest latency with at least q% of requests at or
        below it."""
        n = self.count
        if n == 0:
            raise ValueError("no requests: no percentile")
        cum = np.cumsum(self.counts)
        return int(self.values[int(np.searchsorted(cum, _rank(q, n)))])

    def summary(self) -> dict[str, Any]:
        """What a record says of a point's latency: count, min, mean, stdev, max, the percentiles."""
        n = self.count
        if n == 0:
            return {"count": 0, "percentiles": {}}
        v, c = self.values.astype(float), self.counts.astype(float)
        mean = float((v * c).sum() / n)
        stdev = math.sqrt(float(((v - mean) ** 2 * c).sum()) / (n - 1)) if n > 1 else 0.0
        return {"count": n, "min": int(self.values[0]), "mean": round(mean, 3), "stdev": round(stdev, 3),
                "max": int(self.values[-1]), "percentiles": {q: self.percentile(q) for q in PERCENTILES}}

    def slower(self) -> tuple[Ints, npt.NDArray[np.float64]]:
        """The complementary CDF: each latency and the fraction of requests slower than it."""
        n = self.count
        return self.values, (n - np.cumsum(self.counts)) / max(1, n)

    def encode(self) -> list[list[int]]:
        """Runs of consecutive microseconds (see the module's docstring)."""
        runs: list[list[int]] = []
        last = -GAP - 2
        for v, c in zip(self.values.tolist(), self.counts.tolist(), strict=True):
            if v - last - 1 > GAP:
                runs.append([v])
            else:
                runs[-1] += [0] * (v - last - 1)
            runs[-1].append(c)
            last = v
        return runs

    @classmethod
    def decode(cls, runs: object) -> Histogram:
        """A histogram from its stored runs; ValueError naming the fault when they are not runs of
        whole non-negative numbers in ascending order."""
        if not isinstance(runs, list):
            raise ValueError(f"a latency histogram is a list of runs, not a {type(runs).__name__}")
        values: list[Ints] = []
        counts: list[Ints] = []
        end = 0
        for i, run in enumerate(runs):
            if not isinstance(run, list) or len(run) < 2 or not all(
                    type(x) is int for x in run):  # bool is an int subclass, and not a count
                raise ValueError(f"latency histogram run {i} is not [first_us, count, ...] in whole numbers")
            first, *n = run
            if first < end or first + len(n) > MOST_US:
                raise ValueError(f"latency histogram run {i} starts at {first} us: runs must ascend, "
                                 f"within {MOST_US} us")
            if min(n) < 0 or max(n) >= MOST_COUNT:
                raise ValueError(f"latency histogram run {i} has a count below 0 or above {MOST_COUNT}")
            values.append(np.arange(first, first + len(n), dtype=np.int64))
            counts.append(np.asarray(n, dtype=np.int64))
            end = first + len(n)
        if not values:
            return empty()
        v, c = np.concatenate(values), np.concatenate(counts)
        keep = c > 0
        return cls(v[keep], c[keep])

    @classmethod
    def of(cls, samples_us: Iterable[float]) -> Histogram:
        """The histogram of raw latencies, each in its whole microsecond (as wrk records them)."""
        v, c = np.unique(np.floor(np.fromiter(samples_us, dtype=float)).astype(np.int64), return_counts=True)
        return cls(v, c.astype(np.int64))


def empty() -> Histogram:
    return Histogram(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def merge(hists: Sequence[Histogram]) -> Histogram:
    """The histogram of all the requests of several (clients, iterations): the counts summed."""
    if not hists:
        return empty()
    values, where = np.unique(np.concatenate([h.values for h in hists]), return_inverse=True)
    counts = np.zeros(len(values), dtype=np.int64)
    np.add.at(counts, where, np.concatenate([h.counts for h in hists]))
    return Histogram(values, counts)


@dataclass(frozen=True)
class PointLatency:
    """What the analysis reads of one measurement's latency."""

    percentiles: dict[str, float]  # NaN where the record has none (older records stop at p99.9)
    count: int  # requests the distribution holds
    histogram: Histogram | None  # None for records written before histograms were kept


def from_record(latency: Mapping[str, Any], requests: int) -> PointLatency:
    """A record's `client.latency_us` read back; a record without a histogram (an older run, or wrk2)
    keeps the percentiles it stored. Raises ValueError/TypeError/KeyError on a damaged one."""
    if not isinstance(latency, Mapping):
        raise TypeError(f"latency_us is a {type(latency).__name__}, not an object")
    stored = latency.get("histogram")
    if stored is not None:
        h = Histogram.decode(stored)
        if h.count:
            return PointLatency({q: float(h.percentile(q)) for q in PERCENTILES}, h.count, h)
    pcts = latency["percentiles"]
    return PointLatency({q: float(pcts[q]) if q in pcts else math.nan for q in PERCENTILES},
                        int(latency.get("count", requests)), None)
