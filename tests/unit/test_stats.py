"""The estimators one by one, on numbers worked by hand (the issue's own run among them), and on
hostile input: values that have no logarithm, one iteration, identical values, no overlap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmharness import stats, student_t


@pytest.mark.parametrize(("n", "t"), [(2, 12.706), (3, 4.303), (5, 2.776), (11, 2.228), (31, 2.042)])
def test_a_mean_interval_uses_students_t_for_few_iterations(n: int, t: float) -> None:
    values = [float(v) for v in range(n)]
    iv = stats.mean_interval(values)
    sem = np.std(values, ddof=1) / math.sqrt(n)
    assert iv.half / sem == pytest.approx(t, abs=5e-4)
    assert math.isinf(stats.mean_interval([7.0]).low)


def test_the_issues_run_paired_by_boot_is_a_finding() -> None:
    base, pti = {0: 884.0, 1: 1315.0, 2: 1344.0}, {0: 744.0, 1: 969.0, 2: 911.0}
    c = stats.ratio_change(base, pti, "boot")
    assert c.method == "paired by boot, t on log ratio, n=3"
    assert c.change == pytest.approx(-0.251, abs=1e-3)
    assert (round(c.low, 2), round(c.high, 2)) == (-0.43, -0.02)
    assert c.significant


def test_the_same_numbers_unpaired_are_not() -> None:
    c = stats.ratio_change({0: 884.0, 1: 1315.0, 2: 1344.0}, {3: 744.0, 4: 969.0, 5: 911.0})
    assert c.method == "unpaired, Welch t on log ratio, n=3 and 3"
    assert c.low < 0 < c.high and not c.significant
    assert c.detectable > 0.5  # this comparison could only have seen a large change


def test_blocks_in_common_are_paired_and_the_others_are_named() -> None:
    c = stats.ratio_change({0: 100.0, 1: 110.0, 2: 90.0}, {0: 90.0, 2: 80.0, 5: 85.0})
    assert c.method == "paired by iteration, t on log ratio, n=2 (2 unpaired left out)"


def test_one_iteration_has_a_change_but_no_interval() -> None:
    c = stats.ratio_change({0: 100.0}, {0: 80.0})
    assert c.change == pytest.approx(-0.2) and not c.bounded and not c.significant
    assert c.method == "one iteration: no interval"


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
def test_values_without_a_logarithm_are_left_out(bad: float) -> None:
    c = stats.ratio_change({0: 100.0, 1: 102.0, 2: bad}, {0: 90.0, 1: 91.0, 2: 92.0})
    assert c.n == 2 and math.isfinite(c.low) and math.isfinite(c.high)
    empty = stats.ratio_change({0: bad}, {0: 90.0})
    assert math.isnan(empty.change) and empty.method == "no positive values: no ratio"


def test_identical_ratios_have_a_zero_width_interval() -> None:
    c = stats.ratio_change({0: 100.0, 1: 200.0}, {0: 50.0, 1: 100.0})
    assert c.change == c.low == c.high == pytest.approx(-0.5) and c.significant and c.detectable == 0.0


positive = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)


@given(st.lists(positive, min_size=2, max_size=6), st.lists(positive, min_size=2, max_size=6), st.booleans())
def test_a_change_never_falls_below_minus_100_percent(base: list[float], other: list[float], paired: bool) -> None:
    offset = 0 if paired else 100
    c = stats.ratio_change(dict(enumerate(base)), {offset + i: v for i, v in enumerate(other)})
    assert -1.0 <= c.low <= c.change <= c.high


def test_the_peak_is_where_the_highest_mean_is_with_reproducible_intervals() -> None:
    cells = {8: [100.0, 105.0, 98.0], 16: [200.0, 210.0, 190.0], 32: [150.0, 151.0, 149.0]}
    p = stats.peak(cells)
    assert (p.at, p.at_low, p.at_high, p.value) == (16, 16, 16, 200.0)
    assert p.low < 200.0 < p.high and p == stats.peak(cells)
    assert p.relative_half < stats.mean_interval(cells[16]).relative_half * 1.5


def test_two_peaks_of_equal_height_make_a_range_and_a_lower_bound_below_both() -> None:
    p = stats.peak({8: [100.0, 101.0, 99.0], 16: [200.0, 210.0, 190.0], 32: [205.0, 195.0, 200.0]})
    assert (p.at_low, p.at_high) == (16, 32)
    assert p.low < 195.0


def test_a_peak_of_one_iteration_has_no_interval() -> None:
    p = stats.peak({8: [100.0, 110.0], 16: [200.0], 32: [150.0, 150.0]})
    assert p.at == 16 and not p.bounded and (p.at_low, p.at_high) == (8, 32)


def test_the_split_finds_the_boots_share_and_refuses_too_little_data() -> None:
    rows = np.array([[100.0, 200.0, 300.0], [110.0, 220.0, 330.0], [90.0, 180.0, 270.0]])  # each boot shifts all
    rows[0, 0] *= 1.01  # and a little noise within
    s = stats.split(rows)
    assert s is not None and s.share > 0.95 and s.share_low > 0.5 and s.blocks == 3 and s.counts == 3
    assert stats.split(rows[:1]) is None  # one boot
    assert stats.split(rows[:, :1]) is None  # one count
    assert stats.split(np.ones((3, 3))) is None  # no noise at all


def test_a_plan_repeats_within_a_boot_only_when_boots_are_dear_and_alike() -> None:
    alike = stats.Split(4, 6, between=0.0, within=0.05, share=0.0, share_low=0.0, share_high=0.3, level=0.95)
    dear = stats.plan(alike, 0.02, block_seconds=600.0, measure_seconds=30.0)
    assert dear is not None and dear.repeats > 1
    cheap = stats.plan(alike, 0.02, block_seconds=0.0, measure_seconds=30.0)
    assert cheap is not None and cheap.repeats == 1
    apart = stats.Split(4, 6, between=0.05, within=0.001, share=1.0, share_low=0.9, share_high=1.0, level=0.95)
    boots = stats.plan(apart, 0.02, block_seconds=600.0, measure_seconds=30.0)
    assert boots is not None and boots.repeats == 1 and boots.blocks > 20
    wild = stats.Split(4, 6, between=2.0, within=2.0, share=0.5, share_low=0.1, share_high=0.9, level=0.95)
    assert stats.plan(wild, 0.001, 20.0, 30.0) is None


def test_the_t_tests_p_and_the_quantiles_are_scipy_stats_own() -> None:
    """stats.py computes from scipy.special (a third of scipy.stats' import): the same numbers."""
    from scipy import stats as sps

    vs = stats
    rng = np.random.default_rng(3)
    for n in (2, 3, 5, 12):
        d = rng.normal(0.01, 0.02, n)
        assert vs.p_value(d) == pytest.approx(float(sps.ttest_1samp(d, 0.0).pvalue), rel=1e-12)
        assert student_t.sem(d) == pytest.approx(float(sps.sem(d)), rel=1e-12)
        assert student_t.quantile(0.95, n - 1) == pytest.approx(float(sps.t.ppf(0.975, n - 1)), rel=1e-12)
    assert math.isnan(vs.p_value([0.1])) and vs.p_value([0.1, 0.1]) == 0.0 and vs.p_value([0.0, 0.0]) == 1.0


def test_the_mean_and_its_standard_error_are_numpys_to_the_last_bit() -> None:
    """student_t repeats numpy's steps for speed: the same bits, also past 8 values, where numpy's sum
    goes pairwise, and 128, where it splits; the control: a sum in another order differs somewhere."""
    rng = np.random.default_rng(8)
    other_order = 0
    for n in [*range(2, 40), 127, 128, 129, 1000]:
        for _ in range(40):
            a = np.log(rng.lognormal(rng.normal(0, 5), rng.uniform(0.001, 3), n))
            assert student_t.mean(a) == float(a.mean())
            assert student_t.sem(a) == float(a.std(ddof=1) / math.sqrt(n))
            assert student_t.sem(list(a)) == student_t.sem(a)
            other_order += math.fsum(a) / n != float(a.mean())
    assert other_order > 0  # the check can tell a sum taken otherwise
    assert math.isnan(student_t.sem([1.0])) and math.isnan(student_t.sem([]))
