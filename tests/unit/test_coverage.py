"""Each interval the report prints, on synthetic runs of known answer: of at least 2,000 simulated
runs, a 95% interval must hold the truth in 93-97% of them, and the same check must fail the same
estimator at 90% (it holds the truth in about 90% of runs then), so a test can tell a 95% interval
from a narrower one. The data are drawn with numpy from seeds fixed before the tests first ran and not
used to choose the methods (tests/coverage_kit.py: 50873 for every interval but the peak's height,
which has 27061 of its own), so the tests are deterministic. The estimators are the ones the report
uses, called once per simulated run (the peak's height all runs at once, through the helper peak()
calls). Where an interval falls short in some case, a guard test says by how much, and
docs/statistics.md says it too.

Here: a point's mean (stats.mean_interval), the variance split's share between boots (stats.split)
and the peak's height (stats.peak); test_coverage_ratios.py: the change intervals (paired, Welch,
p99 ratios); test_attribution.py: an attribution study's Bonferroni families, total and interaction."""

from __future__ import annotations

import numpy as np
import pytest

from tests import coverage_kit as kit
from tests.coverage_kit import LEVELS
from vmharness import stats


@LEVELS
@pytest.mark.parametrize("n", [3, 5])
def test_a_points_mean_holds_the_true_mean(n: int, level: float) -> None:
    # a point's throughput over n iterations, each 1000 times (1 ± 3%): the table's 95% CI column
    values = 1000 * (1 + kit.rng(4 + n).normal(0, 0.03, (kit.RUNS, n)))
    intervals = [stats.mean_interval(list(v), level) for v in values]
    kit.judge(np.array([i.low <= 1000 <= i.high for i in intervals]), level)


@LEVELS
@pytest.mark.parametrize(("boots", "counts", "between", "within"), [(4, 6, 0.05, 0.03), (3, 3, 0.20, 0.02)],
                         ids=["4x6", "3x3"])
def test_the_variance_split_holds_the_true_share_between_boots(boots: int, counts: int, between: float,
                                                               within: float, level: float) -> None:
    # boots x counts: each boot shifts all its counts by ±between, each measurement varies by ±within.
    # 20,000 runs: the first 2,000 of the 3x3 design held the truth 92.8% of the time, 4.4 standard
    # errors under 95% (the worst of this seed's first 100 streams; the ratio of mean squares matched
    # its F distribution, and 200,000 runs of the same stream gave 94.97%): a rare draw, not the method,
    # so the stream was kept and more of it drawn
    runs = 10 * kit.RUNS
    r = kit.rng(10 + boots)
    curve = np.log([200.0, 400, 600, 700, 650, 600][:counts])
    truth = between**2 / (between**2 + within**2)
    tables = np.exp(curve + r.normal(0, between, (runs, boots, 1)) + r.normal(0, within, (runs, boots, counts)))
    splits = [stats.split(t, level) for t in tables]
    assert all(s is not None for s in splits)
    kit.judge(np.array([s.share_low <= truth <= s.share_high for s in splits if s is not None]), level)


# The peak's height was the first held to the rule, on a seed of its own: its method was chosen on data
# seeds 1000-1009 (and 5000-5009 gave the figures in docs/statistics.md); PEAK_SEED was fixed before
# these tests first ran and used for nothing else.
PEAK_RUNS = 2000
PEAK_SEED = 27061
# a rounded top (the neighbours 2% and 4% under the peak) at ±3%, and a sharp one at ±4%
ROUNDED = ([16, 32, 64, 128, 192, 256, 384, 512], [400.0, 700, 900, 960, 980, 1000, 980, 900], 0.03)
SHARP = ([8, 16, 32, 64, 128], [300.0, 600, 1000, 800, 700], 0.04)


def peak_runs(shape: tuple[list[int], list[float], float], n: int) -> np.ndarray:
    """PEAK_RUNS runs x counts x n iterations, each the curve times (1 + normal noise)."""
    _, curve, sd = shape
    return np.array(curve)[:, None] * (1 + np.random.default_rng(PEAK_SEED).normal(0, sd, (PEAK_RUNS, len(curve), n)))


def heights(runs: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The height's interval of every run at once, by the helper stats.peak calls with one run."""
    means, sems = runs.mean(2), runs.std(2, ddof=1) / np.sqrt(runs.shape[2])
    df = np.full(runs.shape[1], runs.shape[2] - 1)
    parts = [stats._heights(means[i:i + 200], sems[i:i + 200], df, level, stats.RESAMPLES, stats.SEED)
             for i in range(0, len(runs), 200)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def holds(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return (low <= 1000) & (high >= 1000)  # every curve's true peak is 1000


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("shape", [ROUNDED, SHARP], ids=["rounded", "sharp"])
def test_the_peak_height_holds_the_true_height_in_93_to_97_percent_of_2000_runs(
        shape: tuple[list[int], list[float], float], n: int) -> None:
    low, high = heights(peak_runs(shape, n))
    ok, said = kit.covers(holds(low, high))
    assert ok, said


@pytest.mark.parametrize("shape", [ROUNDED, SHARP], ids=["rounded", "sharp"])
def test_the_peak_holds_the_true_count_and_its_height_is_the_vectorised_one(
        shape: tuple[list[int], list[float], float]) -> None:
    counts, curve, _ = shape
    runs = peak_runs(shape, 3)
    peaks = [stats.peak({c: list(run[i]) for i, c in enumerate(counts)}) for run in runs]
    low, high = heights(runs)
    assert np.allclose([p.low for p in peaks], low) and np.allclose([p.high for p in peaks], high)
    truth = counts[int(np.argmax(curve))]
    # where: a range of whole counts, so it holds the truth more often than 95% (a distinct peak's
    # range is that count alone and always right: the sharp top's); it must not hold it less often
    assert np.mean([p.at_low <= truth <= p.at_high for p in peaks]) >= 0.93
    if shape is SHARP:
        assert all(p.at == truth for p in peaks)
    else:
        assert np.mean([p.at_low == p.at_high for p in peaks]) < 0.5  # the top is seen to be rounded


def test_the_height_check_fails_a_90_percent_interval_and_the_basic_interval_used_before() -> None:
    low, high = heights(peak_runs(SHARP, 3), level=0.90)
    assert np.mean(holds(low, high)) < 0.93
    # before issue 27: the basic interval (2 x peak minus the quantiles) of the maximum over Student-t
    # draws of every point's mean; on the rounded top it lies wholly under the truth about 10% of the time
    runs = peak_runs(ROUNDED, 3)
    means, sems = runs.mean(2), runs.std(2, ddof=1) / np.sqrt(3)
    draws = np.random.default_rng(stats.SEED).standard_t(2, (stats.RESAMPLES, len(ROUNDED[0])))
    tops = np.concatenate([(means[i:i + 200, None] + sems[i:i + 200, None] * draws).max(-1)
                           for i in range(0, PEAK_RUNS, 200)])
    q_low, q_high = np.quantile(tops, (0.025, 0.975), axis=1)
    peak = means.max(1)
    assert np.mean(holds(2 * peak - q_high, 2 * peak - q_low)) < 0.93


def test_a_plan_reaches_its_target_width_on_fresh_runs() -> None:
    # what the plan asks for, measured again with the true noise: the mean's interval is within the
    # target in most runs (the plan sizes the expected width, so about half reach it at worst)
    split = stats.Split(5, 8, between=0.04, within=0.03, share=0.64, share_low=0.3, share_high=0.9, level=0.95)
    plan = stats.plan(split, 0.02, block_seconds=20.0, measure_seconds=30.0)
    assert plan is not None
    r = np.random.default_rng(14)  # fixed before it first ran
    means = (r.normal(0, 0.04, (200, plan.blocks, 1)) + r.normal(0, 0.03, (200, plan.blocks, plan.repeats))).mean(2)
    widths = np.array([stats.mean_interval(list(np.exp(m))).relative_half for m in means])
    assert np.mean(widths <= 0.02) >= 0.4
    assert np.median(widths) <= 0.022


def test_a_flat_top_is_held_less_often_which_docs_statistics_md_states() -> None:
    """Five points of exactly the same height: the maximum of five noisy means, and the highest of their
    lower limits, both lean upwards; measured 87-88% here (docs/statistics.md). A guard that it gets no
    worse, not a claim of 95%."""
    flat = ([8, 16, 32, 64, 128, 256, 512], [400.0, 1000, 1000, 1000, 1000, 1000, 900], 0.03)
    low, high = heights(peak_runs(flat, 5))
    assert 0.85 <= np.mean(holds(low, high)) < 0.93
