"""The coverage rule every printed interval is held to (tests/unit/test_coverage.py's docstring says
why): over RUNS simulated runs drawn from SEED, a 95% interval must hold the truth in 93-97% of them,
and the same check must fail the same estimator asked for a 90% interval, so that it can tell."""

from __future__ import annotations

import numpy as np
import pytest

RUNS = 2000
# Fixed before any test drawing from it first ran, and never changed since: the methods were chosen,
# and docs/statistics.md's figures measured, on other seeds (600-609 and 800-809).
SEED = 50873
LOW, HIGH = 0.93, 0.97
# each test runs at both levels; at 0.90 the check must fail
LEVELS = pytest.mark.parametrize("level", [0.95, 0.90], ids=["95", "90"])


def rng(test: int) -> np.random.Generator:
    """A stream of SEED's for each test (its number), so that adding a test changes no other's data."""
    return np.random.default_rng([SEED, test])


def covers(hits: np.ndarray) -> tuple[bool, str]:
    share = float(np.mean(hits))
    return LOW <= share <= HIGH, f"coverage {share:.1%} of {len(hits)} runs, expected {LOW:.0%}-{HIGH:.0%}"


def judge(hits: np.ndarray, level: float) -> None:
    """The rule at 95%; at 90% the same rule must fail (the interval then holds the truth too rarely)."""
    assert len(hits) >= RUNS
    ok, said = covers(hits)
    print(f"at {level:.0%}: {said}")
    if level == 0.95:
        assert ok, said
    else:
        assert not ok, f"a {level:.0%} interval passed the check, which cannot tell then: {said}"
