"""Each estimator on synthetic runs of known answer: of 200 simulated runs, a 95% interval must hold
the truth in 90-99% of them (the peak's height: of 2,000, in 93-97%). The data are drawn with numpy
from fixed seeds (chosen before any of these ran), so the tests are deterministic; the estimators are
the ones the report uses, called once per simulated run (the peak's height also all runs at once)."""

from __future__ import annotations

import numpy as np
import pytest

from vmharness import stats

RUNS = 200
SEED = 14


def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def assert_covers(hits: np.ndarray, low: float = 0.90, high: float = 0.99) -> None:
    share = float(np.mean(hits))
    assert low <= share <= high, f"coverage {share:.1%} of {len(hits)} runs, expected {low:.0%}-{high:.0%}"


def test_a_paired_ratio_holds_the_true_ratio_when_boots_differ_more_than_kernels() -> None:
    # 3 blocks; each block shifts both instances alike (drift, host state) by ±20%, each boot by ±5% of
    # its own, and each measurement by ±2%; the variant costs 20%.
    r = rng()
    shared = r.normal(0, 0.20, (RUNS, 3))
    base = np.exp(np.log(1000) + shared + r.normal(0, 0.05, (RUNS, 3)) + r.normal(0, 0.02, (RUNS, 3)))
    other = np.exp(np.log(800) + shared + r.normal(0, 0.05, (RUNS, 3)) + r.normal(0, 0.02, (RUNS, 3)))
    changes = [stats.ratio_change(dict(enumerate(b)), dict(enumerate(o)), "boot") for b, o in zip(base, other,
                                                                                                   strict=True)]
    assert {c.method for c in changes} == {"paired by boot, t on log ratio, n=3"}
    assert_covers(np.array([c.low <= -0.2 <= c.high for c in changes]))
    unpaired = [stats.ratio_change(dict(enumerate(b)), {3 + i: v for i, v in enumerate(o)})
                for b, o in zip(base, other, strict=True)]
    # pairing finds the cost despite the boots; ignoring the blocks rarely does
    assert np.mean([c.significant for c in changes]) > 2 * np.mean([c.significant for c in unpaired])


def test_an_unpaired_ratio_holds_the_true_ratio_with_unequal_spreads() -> None:
    # no blocks in common: Welch's t on logs, 4 baseline iterations at ±3% and 3 variant ones at ±10%
    r = rng()
    base = np.exp(np.log(500) + r.normal(0, 0.03, (RUNS, 4)))
    other = np.exp(np.log(550) + r.normal(0, 0.10, (RUNS, 3)))
    changes = [stats.ratio_change(dict(enumerate(b)), {10 + i: v for i, v in enumerate(o)})
               for b, o in zip(base, other, strict=True)]
    assert {c.method for c in changes} == {"unpaired, Welch t on log ratio, n=4 and 3"}
    assert_covers(np.array([c.low <= 0.1 <= c.high for c in changes]))


@pytest.mark.parametrize("tail", ["lognormal", "pareto"])
def test_a_wild_tail_gives_p99_ratios_that_hold_the_truth_and_never_fall_below_minus_100(tail: str) -> None:
    # each iteration's p99 is taken from 5,000 latencies of a heavy-tailed distribution; the variant
    # scales every latency by 1.3 (so its true p99 is 1.3 times the baseline's); each block shifts
    # both by a shared ±30%.
    r = rng()
    shape = (RUNS, 3, 5000)

    def latencies() -> np.ndarray:
        return r.lognormal(0.0, 1.0, shape) if tail == "lognormal" else r.pareto(2.0, shape) + 1.0

    block = np.exp(r.normal(0, 0.30, (RUNS, 3)))
    base = np.quantile(latencies(), 0.99, axis=2) * block * 100
    other = np.quantile(latencies(), 0.99, axis=2) * block * 130
    changes = [stats.ratio_change(dict(enumerate(b)), dict(enumerate(o))) for b, o in zip(base, other, strict=True)]
    assert_covers(np.array([c.low <= 0.3 <= c.high for c in changes]))
    assert min(c.low for c in changes) > -1.0


# The peak's height gets a stricter check: 2,000 runs and 93-97%, which a 90% interval fails. Its
# method was chosen on data seeds 1000-1009 (and 5000-5009 gave the figures in docs/statistics.md);
# PEAK_SEED was fixed before these tests first ran and used for nothing else.
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
    assert_covers(holds(low, high), 0.93, 0.97)


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


def test_the_variance_split_holds_the_true_share_between_boots() -> None:
    # 4 boots x 6 counts: each boot shifts all its counts by ±5%, each measurement varies by ±3%
    r = rng()
    curve = np.log([200.0, 400, 600, 700, 650, 600])
    between, within = 0.05, 0.03
    truth = between**2 / (between**2 + within**2)
    tables = np.exp(curve + r.normal(0, between, (RUNS, 4, 1)) + r.normal(0, within, (RUNS, 4, 6)))
    splits = [stats.split(t) for t in tables]
    assert all(s is not None for s in splits)
    assert_covers(np.array([s.share_low <= truth <= s.share_high for s in splits if s is not None]))


def test_a_plan_reaches_its_target_width_on_fresh_runs() -> None:
    # what the plan asks for, measured again with the true noise: the mean's interval is within the
    # target in most runs (the plan sizes the expected width, so about half reach it at worst)
    split = stats.Split(5, 8, between=0.04, within=0.03, share=0.64, share_low=0.3, share_high=0.9, level=0.95)
    plan = stats.plan(split, 0.02, block_seconds=20.0, measure_seconds=30.0)
    assert plan is not None
    r = rng()
    means = (r.normal(0, 0.04, (RUNS, plan.blocks, 1)) + r.normal(0, 0.03, (RUNS, plan.blocks, plan.repeats))).mean(2)
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
