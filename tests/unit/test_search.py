"""The adaptive peak search and the sequential stopping rule on synthetic curves of known answer: a
plateau, a sharp peak, a curve still rising at the edge, a noisy one, and any curve hypothesis draws.
Random data come from numpy generators with fixed seeds, so every run of these tests is the same."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmharness import stats
from vmharness.bench.search import (
    SEQUENTIAL_MINIMUM,
    Spec,
    coarse_counts,
    more_iterations,
    next_count,
    peak_count,
)

Curve = Callable[[int], float]
# seed 001's grid, as its script runs it (`seq 16 16 256` `seq 256 128 1024` `seq 1024 256 1536`): 26 runs of
# 24 distinct counts (256 and 1024 twice), 3 iterations each
GRID = [*range(16, 257, 16), *range(256, 1025, 128), *range(1024, 1537, 256)]
GRID_ITERATIONS = 3
SEED = 16


def search(f: Curve, spec: Spec) -> tuple[dict[int, float], list[int]]:
    """The loop the runner drives: measure what next_count asks for until it says the peak is found."""
    curve: dict[int, float] = {}
    order: list[int] = []
    while (count := next_count(curve, spec)) is not None:
        assert count not in curve, f"{count} asked for twice"
        curve[count] = f(count)
        order.append(count)
    return curve, order


def within(count: int, target: float, share: float) -> bool:
    return abs(math.log(count / target)) <= math.log1p(share)


def test_the_seed_grid_runs_26_points_of_24_counts() -> None:
    assert len(GRID) == 26 and len(set(GRID)) == 24 and GRID[0] == 16 and GRID[-1] == 1536


def test_the_ladder_climbs_geometrically_and_ends_at_the_limit() -> None:
    assert coarse_counts(Spec(16, 1536)) == [16, 32, 64, 128, 256, 512, 1024, 1536]
    assert coarse_counts(Spec(16, 1024)) == [16, 32, 64, 128, 256, 512, 1024]
    assert coarse_counts(Spec(1, 5, factor=1.1)) == [1, 2, 3, 4, 5]  # always one more at least
    assert coarse_counts(Spec(7, 7)) == [7]


def test_a_plateau_is_found_where_it_starts_in_few_points() -> None:
    spec = Spec(16, 1536)
    curve, _ = search(lambda c: min(c, 200) * 100.0, spec)
    best = peak_count(curve)
    assert 200 <= best <= 200 * (1 + spec.resolution), best
    assert len(curve) <= 12, sorted(curve)
    assert peak_count(curve) < spec.limit


def test_a_sharp_peak_is_located_within_the_resolution() -> None:
    spec = Spec(16, 1536)
    curve, _ = search(lambda c: 1e5 * math.exp(-4 * abs(math.log(c / 300))), spec)
    assert within(peak_count(curve), 300, spec.resolution), sorted(curve)
    assert len(curve) <= 13, sorted(curve)


def test_a_sharp_peak_at_the_first_count_is_refined_only_upwards() -> None:
    spec = Spec(16, 1536)
    curve, _ = search(lambda c: 1e5 * math.exp(-4 * abs(math.log(c / 16))), spec)
    assert peak_count(curve) == 16 and min(curve) == 16
    assert any(16 < c < 32 for c in curve)


def test_a_curve_still_rising_at_the_edge_measures_every_coarse_count_and_says_so() -> None:
    spec = Spec(16, 1536)
    curve, order = search(lambda c: 50.0 * c, spec)
    assert order == coarse_counts(spec)
    assert peak_count(curve) == max(curve) == spec.limit  # still rising at the range's end
    assert next_count(curve, spec) is None


def test_a_slow_creep_that_beats_the_best_by_less_than_rise_still_gets_a_point_above_it() -> None:
    # +1% a step is no rise, but the peak cannot be where the search stops climbing: it climbs on
    spec = Spec(16, 1536)
    curve, _ = search(lambda c: 1000 + min(c, 300) / 30, spec)
    assert max(curve) > peak_count(curve)


@pytest.mark.parametrize("spec", [Spec(16, 1536), Spec(16, 1536, factor=4, resolution=0.25)], ids=["default", "lean"])
def test_a_noisy_peak_is_found_as_the_grid_finds_it_in_a_third_of_the_grids_measurements(spec: Spec) -> None:
    """A smooth peak at 700 (throughput 2x / (1 + x^2), x = count / 700: within 2% of the top from 573
    to 856), each measurement with 2% noise, 300 seeds. The search measures each point once, then the
    peak until more_iterations stops. Found: within one grid step of 700 (128 there) or within 2% of
    the true top. Figures: default spec 91.7% found, 12.0 points (at most 13), 17.4 measurements in
    all (at most 21); lean spec 96.7%, 9.0 points (at most 9), 14.1 measurements (at most 18). The
    grid, 3 iterations of 26 runs (78 measurements), finds it in 99.0% of the same seeds."""

    def truth(c: int) -> float:
        return 2 * (c / 700) / (1 + (c / 700) ** 2)

    found, points, measurements = [], [], []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        curve, _ = search(lambda c: truth(c) * (1 + rng.normal(0, 0.02)), spec)  # noqa: B023 (used at once)
        best = peak_count(curve)
        values = [curve[best]]
        while more_iterations(values):
            values.append(truth(best) * (1 + rng.normal(0, 0.02)))
        found.append(abs(best - 700) <= 128 or truth(best) >= 0.98)
        points.append(len(curve))
        measurements.append(len(curve) + len(values) - 1)
    share = float(np.mean(found))
    figures = f"found in {share:.1%}, {np.mean(points):.1f} points, {np.mean(measurements):.1f} measurements"
    assert share >= 0.90, figures
    assert max(measurements) <= len(GRID) * GRID_ITERATIONS / 3, figures
    assert max(points) <= len(GRID) / 2, figures


CURVES: dict[str, Callable[[int, int], Curve]] = {
    "log-normal peak": lambda p, s: lambda c: math.exp(-((math.log(c / p)) ** 2) * (1 + s % 7)),
    "plateau": lambda p, s: lambda c: float(min(c, p)),
    "rising": lambda p, s: lambda c: float(c),
    "falling": lambda p, s: lambda c: 1.0 / c,
    "any values at all": lambda p, s: lambda c: float((c * 2654435761 + s) % 1000003),
}


@settings(max_examples=300, deadline=None)
@given(start=st.integers(1, 400), span=st.integers(0, 5000), factor=st.floats(1.05, 5),
       rise=st.floats(0, 0.5), patience=st.integers(1, 4), resolution=st.floats(0.005, 1),
       kind=st.sampled_from(sorted(CURVES)), peak=st.integers(1, 6000), salt=st.integers(0, 10**6))
def test_any_search_ends_within_a_bound_never_repeats_stays_in_range_and_replays_the_same(
        start: int, span: int, factor: float, rise: float, patience: int, resolution: float, kind: str,
        peak: int, salt: int) -> None:
    spec = Spec(start, start + span, factor, rise, patience, resolution)
    curve, order = search(CURVES[kind](peak, salt), spec)
    assert len(order) <= len(coarse_counts(spec)) + 2 * math.log2(spec.limit) + 5, order
    assert all(spec.start <= c <= spec.limit for c in order)
    for k, count in enumerate(order):  # stateless: the first k points always ask for the (k+1)th
        assert next_count({c: curve[c] for c in order[:k]}, spec) == count
    assert next_count(dict(reversed(curve.items())), spec) is None  # the order of the records is no matter


def test_the_peak_is_the_lowest_count_of_the_highest_throughput() -> None:
    assert peak_count({64: 5.0, 16: 9.0, 32: 9.0}) == 16
    with pytest.raises(ValueError, match="no points"):
        peak_count({})


def test_a_throughput_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        next_count({16: 1.0, 32: math.nan}, Spec(16, 64))


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"start": 0, "limit": 10}, "start"), ({"start": -3, "limit": 10}, "start"),
    ({"start": 20, "limit": 10}, "limit"), ({"start": 1, "limit": 10, "factor": 1.0}, "factor"),
    ({"start": 1, "limit": 10, "factor": math.nan}, "factor"), ({"start": 1, "limit": 10, "rise": 1.0}, "rise"),
    ({"start": 1, "limit": 10, "rise": -0.1}, "rise"), ({"start": 1, "limit": 10, "patience": 0}, "patience"),
    ({"start": 1, "limit": 10, "resolution": 0.0}, "resolution"),
    ({"start": 1, "limit": 10, "resolution": -1.0}, "resolution"),
])
def test_a_spec_with_a_bad_value_is_refused_naming_it(kwargs: dict[str, float], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        Spec(**kwargs)  # type: ignore[arg-type]


def test_iterations_go_on_until_the_minimum_then_stop_within_the_width_or_at_the_cap() -> None:
    assert more_iterations([]) and more_iterations([100.0] * 4)  # minimum 5, even when they agree
    assert not more_iterations([100.0, 100.1, 99.9, 100.0, 100.05])  # +-0.1%: within +-2%
    assert more_iterations([100.0, 110.0, 90.0, 100.0, 105.0])  # +-9%: measure again
    assert not more_iterations([100.0, 110.0, 90.0] * 4)  # 12 values: past the cap of 10
    assert not more_iterations([100.0, 110.0] * 5)  # exactly the cap
    assert more_iterations([100.0, 101.0, 99.0], width=0.001, minimum=3)
    assert not more_iterations([100.0, 101.0, 99.0], width=0.05, minimum=3)
    assert more_iterations([100.0, 100.1, 99.9], minimum=4)
    assert not more_iterations([1.0], minimum=1, cap=1)


def _coverage(minimum: int) -> float:
    """Normal values (mean 100, sd 3: the worst case for a +-2% target, where stopping is decided on
    the sample's spread more often than at the cap) drawn until the rule says stop, 2000 trials; the
    share whose final 95% t-interval holds the mean."""
    rng = np.random.default_rng(SEED)
    hits = []
    for _ in range(2000):
        values: list[float] = []
        while more_iterations(values, minimum=minimum):
            values.append(float(rng.normal(100, 3)))
        interval = stats.mean_interval(values)
        hits.append(interval.low <= 100 <= interval.high)
    return float(np.mean(hits))


def test_stopping_once_the_interval_is_narrow_keeps_its_95_percent_coverage() -> None:
    """Stopping when the interval looks narrow picks samples that underestimate their spread. With
    the rule's minimum of 5 values coverage was 93.2% (mean 8.7 values; at least 92.7% for sd 1 to 5)."""
    assert SEQUENTIAL_MINIMUM == 5
    coverage = _coverage(SEQUENTIAL_MINIMUM)
    assert coverage >= 0.92, f"coverage {coverage:.1%} of 2000 trials"


def test_a_minimum_of_three_values_would_cost_coverage_which_is_why_it_is_five() -> None:
    """With 3 values allowed to end it, coverage was 90.3% (mean 8.2 values; a run that stopped at 3
    held the mean only half the time): visibly below 95%, the reason for SEQUENTIAL_MINIMUM."""
    coverage = _coverage(3)
    assert 0.85 <= coverage < 0.92, f"coverage {coverage:.1%} of 2000 trials"
