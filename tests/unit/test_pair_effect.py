"""The campaign report's pair effect (vmharness/campaign/paireffect.py), on simulated campaign results
of known answer, drawn from the coverage rule's seed (tests/coverage_kit.py, streams 30-33, not used to
choose the method): a cell's runs on 4 node pairs, 3 on each, with multiplicative noise.

- a planted pair effect (two pairs 4% off the others, 2% noise) is flagged in most runs, and a campaign
  with none is flagged about as often as the test's level says (5%);
- the interval on the share of the variance between pairs holds the truth in 93-97% of 2,000 runs at
  95%, and fails that rule at 90% (the coverage rule every printed interval is held to);
- F and p are scipy.stats.f_oneway's, on the logs; too few repetitions are said, not estimated."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from tests import coverage_kit as kit
from tests.coverage_kit import LEVELS
from vmharness.campaign import paireffect

PAIRS, RUNS_PER_PAIR, NOISE = 4, 3, 0.02


def campaigns(stream: int, shifts: list[float], between: float = 0.0, runs: int = kit.RUNS) -> np.ndarray:
    """runs x pairs x repetitions of one cell's throughput: each pair shifted by `shifts` (fixed) and by
    a random N(0, between) of its own, each run by N(0, NOISE), all on logs."""
    r = kit.rng(stream)
    fixed = np.log1p(np.asarray(shifts))[None, :, None]
    return np.asarray(np.exp(np.log(1000) + fixed + r.normal(0, between, (runs, PAIRS, 1))
                  + r.normal(0, NOISE, (runs, PAIRS, RUNS_PER_PAIR))), dtype=float)


def flagged(data: np.ndarray) -> float:
    results = [paireffect.one_way(list(d)) for d in data]
    assert all(a is not None for a in results)
    return float(np.mean([a.p < 0.05 for a in results if a is not None]))


def test_a_planted_pair_effect_is_flagged_in_most_campaigns() -> None:
    share = flagged(campaigns(30, [0, 0.04, -0.04, 0], runs=1000))
    print(f"flagged in {share:.1%}")
    assert share >= 0.85


def test_without_a_pair_effect_it_is_flagged_about_as_often_as_the_level() -> None:
    share = flagged(campaigns(31, [0, 0, 0, 0]))
    print(f"flagged in {share:.1%}")
    # the F test's level is exact under normal noise: 5% of 2,000 runs within three standard errors
    # (this stream's first 2,000 flag 6.2%, 2.5 standard errors over; its first 10,000, 5.3%)
    assert 0.035 <= share <= 0.065


@LEVELS
def test_the_share_between_pairs_holds_the_truth(level: float) -> None:
    between = 0.03
    truth = between**2 / (between**2 + NOISE**2)
    results = [paireffect.one_way(list(d), level) for d in campaigns(32, [0] * PAIRS, between)]
    kit.judge(np.array([a is not None and a.share_low <= truth <= a.share_high for a in results]), level)


def test_f_and_p_are_scipys_one_way_anova_on_logs() -> None:
    r = kit.rng(33)
    groups = [list(np.exp(r.normal(7, 0.05, n))) for n in (2, 3, 5)]
    a = paireffect.one_way(groups)
    want = sps.f_oneway(*[np.log(g) for g in groups])
    assert a is not None and (a.df, a.pairs, a.runs) == ((2, 7), 3, 10)
    assert a.f == pytest.approx(want.statistic) and a.p == pytest.approx(want.pvalue)
    assert 0 <= a.share_low <= a.share <= a.share_high <= 1


def test_too_few_repetitions_are_said_and_each_pair_is_paired_with_the_baseline_there() -> None:
    """One run per pair: no estimate, and the report says why; with two per pair, each pair's change
    is against the baseline on the same pair (a pair 10% faster for both cells shows no change)."""
    def row(cell: str, pair: str, rps: float) -> dict[str, object]:
        return {"cell": cell, "instance": "b", "state": "done", "pair": pair, "requests_per_s": rps}

    once = [row("base", "p1", 100.0), row("base", "p2", 110.0), row("x", "p1", 90.0), row("x", "p2", 99.0)]
    got = {e["cell"]: e for e in paireffect.effects(once, ("base", "b"))}
    assert "too few repetitions" in got["x"]["note"] and "p" not in got["x"]
    assert [p["change"] for p in got["x"]["pairs"]] == [pytest.approx(-0.1), pytest.approx(-0.1)]
    twice = [*once, row("base", "p1", 101.0), row("base", "p2", 109.0), row("x", "p1", 91.0), row("x", "p2", 98.0),
             row("y", "p1", 95.0), row("y", "failed", 1.0) | {"state": "failed"}]
    got = {e["cell"]: e for e in paireffect.effects(twice, ("base", "b"))}
    assert got["x"]["note"] == "" and got["x"]["flagged"] and got["x"]["p"] < 0.01
    assert got["x"]["share_low"] > 0.5 and got["x"]["between"] > 0.05
    assert "y" not in got  # one pair: no pair effect to speak of


CELLS = 8


def campaign_rows(data: np.ndarray) -> list[dict[str, object]]:
    """One campaign's rows (as gather.build gives them) from cells x pairs x repetitions of throughput."""
    return [{"cell": f"c{c}", "instance": "i", "state": "done", "pair": f"pair{p}", "requests_per_s": float(v)}
            for c, cell in enumerate(data) for p, runs in enumerate(cell) for v in runs]


def test_over_a_campaigns_cells_a_pair_effect_is_flagged_by_holm() -> None:
    """Eight cells without any pair effect: one F test per cell at 5% would flag one in a third of such
    campaigns (1 - 0.95^8); Holm's step-down over the cells flags one in about 5% of them, as its
    family-wise level says. The price is power: a cell with the planted effect above (flagged in about
    90% of campaigns on its own) among seven without is flagged in about half, the seven rarely."""
    none = campaigns(34, [0] * PAIRS, runs=800 * CELLS).reshape(800, CELLS, PAIRS, RUNS_PER_PAIR)
    found = [paireffect.effects(campaign_rows(c), ("c0", "i")) for c in none]
    assert all(len(f) == CELLS and all(e["tests"] == CELLS for e in f) for f in found)
    any_raw = np.mean([any(e["p"] < 0.05 for e in f) for f in found])
    any_holm = np.mean([any(e["flagged"] for e in f) for f in found])
    print(f"campaigns with a cell flagged: {any_raw:.1%} one test at a time, {any_holm:.1%} by Holm")
    assert any_raw >= 0.25 and 0.027 <= any_holm <= 0.073  # 800 campaigns: 0.77 points a standard error
    planted = campaigns(35, [0, 0.04, -0.04, 0], runs=400)[:, None]
    mixed = np.concatenate([planted, campaigns(36, [0] * PAIRS, runs=400 * (CELLS - 1)).reshape(
        400, CELLS - 1, PAIRS, RUNS_PER_PAIR)], axis=1)
    found = [paireffect.effects(campaign_rows(c), ("c0", "i")) for c in mixed]
    hit = np.mean([f[0]["flagged"] for f in found])
    false = np.mean([any(e["flagged"] for e in f[1:]) for f in found])
    print(f"the planted cell flagged in {hit:.1%}; another in {false:.1%}")
    assert hit >= 0.45 and false <= 0.08
