"""Where throughput peaks, found in a handful of measured points instead of a fixed grid.

Why: seed 001's grid (28 connection counts, 16 to 1536, three iterations each) costs about 42 minutes
per instance. Throughput against connections rises, flattens and may fall, and only the count where it
stops rising matters. A geometric ladder (start, start x factor, ...) finds that region in a few
points; golden-section steps inside the bracket around the best point then locate the peak to within
`resolution`; iterations are spent only at the peak (`more_iterations`, a sequential stopping rule).

Why by hand: scipy.optimize's golden and brent expect a continuous, cheap, noise-free function and
keep their state in a loop. Here each evaluation is a 5-30 s measurement in another process, the
argument is an integer, and a run resumed with --resume must take up the search from its records.
So every answer is derived from the points measured so far and nothing else: the same records give
the same next count."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vmharness import stats

GOLDEN = (3 - math.sqrt(5)) / 2  # 0.382: the golden-section point's share of a gap, from the best end


@dataclass(frozen=True)
class Spec:
    start: int  # the first connection count (>= 1)
    limit: int  # the largest count the search may try (>= start)
    factor: float = 2.0  # coarse step: each count is the previous times this (rounded, always > previous)
    rise: float = 0.03  # a coarse step that beats the best so far by less than this share is "no rise"
    patience: int = 2  # the coarse phase ends after this many steps in a row without a rise, or at limit
    resolution: float = 0.15  # refinement ends when the measured neighbours of the best are within this
    # share of it (in log space: |ln(n/best)| <= ln(1 + resolution)), or are adjacent integers

    def __post_init__(self) -> None:
        checks = [(self.start >= 1, f"start must be at least 1, not {self.start}"),
                  (self.limit >= self.start, f"limit {self.limit} must be at least start {self.start}"),
                  (self.factor > 1, f"factor must be above 1, not {self.factor}"),
                  (0 <= self.rise < 1, f"rise must be in [0, 1), not {self.rise}"),
                  (self.patience >= 1, f"patience must be at least 1, not {self.patience}"),
                  (self.resolution > 0, f"resolution must be above 0, not {self.resolution}")]
        for ok, message in checks:
            if not ok:  # also catches NaN, which fails every comparison
                raise ValueError(f"search spec: {message}")


def coarse_counts(spec: Spec) -> list[int]:
    """start, start x factor, ... below limit, then limit itself."""
    counts = [spec.start]
    while counts[-1] < spec.limit:
        counts.append(min(spec.limit, max(counts[-1] + 1, round(counts[-1] * spec.factor))))
    return counts


def peak_count(curve: Mapping[int, float]) -> int:
    """The count with the highest throughput; the lowest such count on ties."""
    if not curve:
        raise ValueError("peak_count: no points measured")
    return min(curve, key=lambda c: (-curve[c], c))


def _coarse_next(curve: Mapping[int, float], spec: Spec) -> int | None:
    """The next ladder count while the coarse phase lasts, else None. The phase also goes on while the
    last step, though too small to count as a rise, is the best so far: the peak needs a point above."""
    best, quiet = -math.inf, 0
    for i, count in enumerate(coarse_counts(spec)):
        if count not in curve:
            return count
        value = curve[count]
        risen = i == 0 or (value > best and value >= best * (1 + spec.rise))
        quiet = 0 if risen else quiet + 1
        if value > best:
            best = value
        elif quiet >= spec.patience:
            return None
    return None


def _inside(best: int, other: int) -> int | None:
    """The golden-section point between best and a measured neighbour (log space), None if no integer
    lies strictly between them."""
    low, high = sorted((best, other))
    if high - low < 2:
        return None
    return min(high - 1, max(low + 1, round(best * math.pow(other / best, GOLDEN))))


def next_count(curve: Mapping[int, float], spec: Spec) -> int | None:
    """The next count to measure, or None once the peak is located or lies at the limit. First the
    ladder (coarse_counts) until throughput stops rising; then, of the two gaps between the best point
    and its measured neighbours that are still wider than the resolution, the wider one (log space)
    gets a point at its golden section from the best end. A better point there becomes the best; a
    worse one narrows the gap: the bracket around the best only shrinks, whatever the curve."""
    if not all(math.isfinite(v) for v in curve.values()):
        raise ValueError("next_count: every measured throughput must be a finite number")
    coarse = _coarse_next(curve, spec)
    if coarse is not None:
        return coarse
    best = peak_count(curve)
    if best == spec.limit:
        return None
    below = [c for c in curve if c < best]
    above = [c for c in curve if c > best]
    neighbours = ([max(below)] if below else []) + ([min(above)] if above else [])
    open_gaps = [(abs(math.log(n / best)), point) for n in neighbours
                 if abs(math.log(n / best)) > math.log1p(spec.resolution) and (point := _inside(best, n)) is not None]
    return max(open_gaps)[1] if open_gaps else None


# The fewest values a sequential stop may rest on. Stopping as soon as the interval looks narrow picks
# samples that happen to underestimate their spread: simulated (tests/unit/test_search.py), a 95%
# t-interval then held the true mean 90.3% of the time when 3 values could end it, 93.2% with 5.
SEQUENTIAL_MINIMUM = 5


def more_iterations(values: Sequence[float], width: float = 0.02, minimum: int = SEQUENTIAL_MINIMUM,
                    cap: int = 10) -> bool:
    """Sequential stopping at one point: measure again while fewer than `minimum` values, or while
    below `cap` and the 95% t-interval of the mean is wider than +-width of it."""
    if len(values) < minimum:
        return True
    return len(values) < cap and stats.mean_interval(values).relative_half > width
