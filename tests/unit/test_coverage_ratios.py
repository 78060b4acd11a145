"""The change intervals (stats.ratio_change) under the coverage rule of test_coverage.py: paired by
boot, unpaired (Welch), and p99 ratios of heavy-tailed latencies; 2,000 runs of tests/coverage_kit.py's
seed each, called once per run as the report calls it, at 95% (93-97% must hold the truth) and at 90%
(the same check must fail)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests import coverage_kit as kit
from tests.coverage_kit import LEVELS
from vmharness import stats


@functools.cache
def paired_runs() -> tuple[np.ndarray, np.ndarray]:
    # 3 blocks; each block shifts both instances alike (drift, host state) by ±20%, each boot by ±5% of
    # its own, and each measurement by ±2%; the variant costs 20%.
    r = kit.rng(1)
    shared = r.normal(0, 0.20, (kit.RUNS, 3))
    base = np.exp(np.log(1000) + shared + r.normal(0, 0.05, (kit.RUNS, 3)) + r.normal(0, 0.02, (kit.RUNS, 3)))
    other = np.exp(np.log(800) + shared + r.normal(0, 0.05, (kit.RUNS, 3)) + r.normal(0, 0.02, (kit.RUNS, 3)))
    return base, other


@LEVELS
def test_a_paired_ratio_holds_the_true_ratio_when_boots_differ_more_than_kernels(level: float) -> None:
    base, other = paired_runs()
    changes = [stats.ratio_change(dict(enumerate(b)), dict(enumerate(o)), "boot", level)
               for b, o in zip(base, other, strict=True)]
    assert {c.method for c in changes} == {"paired by boot, t on log ratio, n=3"}
    kit.judge(np.array([c.low <= -0.2 <= c.high for c in changes]), level)


def test_pairing_finds_the_cost_that_ignoring_the_blocks_rarely_does() -> None:
    base, other = paired_runs()
    paired = [stats.ratio_change(dict(enumerate(b)), dict(enumerate(o)), "boot")
              for b, o in zip(base, other, strict=True)]
    unpaired = [stats.ratio_change(dict(enumerate(b)), {3 + i: v for i, v in enumerate(o)})
                for b, o in zip(base, other, strict=True)]
    assert np.mean([c.significant for c in paired]) > 2 * np.mean([c.significant for c in unpaired])


@LEVELS
def test_an_unpaired_ratio_holds_the_true_ratio_with_unequal_spreads(level: float) -> None:
    # no blocks in common: Welch's t on logs, 4 baseline iterations at ±3% and 3 variant ones at ±10%.
    # The df is estimated from the two spreads, and with so few values this interval holds the truth
    # 93.6% of the time here (20,000 runs of seeds 800-809; docs/statistics.md: 93.5-97.8% over other
    # cases): it passes, but near the rule's lower end
    r = kit.rng(2)
    base = np.exp(np.log(500) + r.normal(0, 0.03, (kit.RUNS, 4)))
    other = np.exp(np.log(550) + r.normal(0, 0.10, (kit.RUNS, 3)))
    changes = [stats.ratio_change(dict(enumerate(b)), {10 + i: v for i, v in enumerate(o)}, level=level)
               for b, o in zip(base, other, strict=True)]
    assert {c.method for c in changes} == {"unpaired, Welch t on log ratio, n=4 and 3"}
    kit.judge(np.array([c.low <= 0.1 <= c.high for c in changes]), level)


@functools.cache
def p99_runs(tail: str) -> tuple[np.ndarray, np.ndarray]:
    """Each iteration's p99 (inverted_cdf, as the report takes it from the histogram) of 5,000 latencies
    of a heavy-tailed distribution; the variant scales every latency by 1.3 (so its true p99 is 1.3
    times the baseline's); each block shifts both by a shared ±30%. Drawn 200 runs at a time."""
    r = kit.rng(3 if tail == "lognormal" else 4)
    parts = []
    for _ in range(kit.RUNS // 200):
        shape = (200, 3, 5000)
        block = np.exp(r.normal(0, 0.30, (200, 3)))
        p99 = [np.quantile(r.lognormal(0.0, 1.0, shape) if tail == "lognormal" else r.pareto(2.0, shape) + 1.0,
                           0.99, axis=2, method="inverted_cdf") * block for _ in range(2)]
        parts.append((p99[0] * 100, p99[1] * 130))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@LEVELS
@pytest.mark.parametrize("tail", ["lognormal", "pareto"])
def test_a_wild_tail_gives_p99_ratios_that_hold_the_truth_and_never_fall_below_minus_100(
        tail: str, level: float) -> None:
    base, other = p99_runs(tail)
    changes = [stats.ratio_change(dict(enumerate(b)), dict(enumerate(o)), level=level)
               for b, o in zip(base, other, strict=True)]
    kit.judge(np.array([c.low <= 0.3 <= c.high for c in changes]), level)
    assert min(c.low for c in changes) > -1.0
