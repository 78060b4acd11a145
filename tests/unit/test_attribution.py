"""The attribution study on simulated studies of known truth: exact answers without noise, the coverage
of every interval an attribution prints (test_coverage.py's rule: 2,000 studies from tests/coverage_kit.py's
seed, 93-97% at 95%, and the check fails at 90%), the family-wise error of Holm's step-down over 4,000
studies of the same seed against a Holm at 7% and unadjusted tests, its power, and damaged data. SEED
was chosen before any of these ran and was not used to choose the method; every other test draws from
it, so the tests are deterministic.

The simulation: per block a boot effect (log-normal, sd 0.05) shared by every variant, per variant and
block a noise (sd 0.02); each switch s has a log-additive effect e_s from all_off, and all_on alone gets
a further term K. By the study's definitions the truth is then: marginal cost of s = exp(e_s + K) - 1,
total = exp(sum e + K) - 1, interaction = exp(-(m - 1) K) - 1, cost alone = exp(e_s) - 1."""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Sequence

import numpy as np
import pytest

from tests import coverage_kit as kit
from vmharness.analysis import attribution as at
from vmharness.stats import Change

SEED = 7041
BLOCKS = 5
COSTS = (-0.10, -0.03, 0.0)  # the true marginal costs
K = 0.02  # the term all_on gets on top of the log-additive effects


def rng(test: int) -> np.random.Generator:
    return np.random.default_rng([SEED, test])


def simulate(r: np.random.Generator, runs: int, costs: Sequence[float] = COSTS, k: float = K, boot: float = 0.05,
             noise: float = 0.02, blocks: int = BLOCKS) -> list[dict[str, dict[int, float]]]:
    """`runs` tables, each with all_on, all_off, leave_one_out and one_on of every switch."""
    names = [f"s{i}" for i in range(len(costs))]
    e = np.log1p(np.asarray(costs)) - k  # so that the marginal costs are `costs`
    shared = r.normal(0, boot, (runs, blocks))
    on = np.ones(len(costs), dtype=bool)
    variants = {at.ALL_ON: (on, k), at.ALL_OFF: (~on, 0.0)}
    for i, s in enumerate(names):
        variants[at.leave_one_out(s)] = (on & (np.arange(len(costs)) != i), 0.0)
        variants[at.one_on(s)] = (np.arange(len(costs)) == i, 0.0)
    logs = {v: math.log(10_000) + float(e[mask].sum()) + extra + shared + r.normal(0, noise, (runs, blocks))
            for v, (mask, extra) in variants.items()}
    return [{v: dict(enumerate(np.exp(x[i]).tolist())) for v, x in logs.items()} for i in range(runs)]


def switches(costs: Sequence[float] = COSTS) -> list[str]:
    return [f"s{i}" for i in range(len(costs))]


def covers(c: Change, truth: float) -> bool:
    return c.low <= truth <= c.high


def test_without_noise_every_estimate_is_the_truth() -> None:
    table = simulate(rng(1), 1, noise=0.0)[0]
    s = at.study("throughput", table, switches())
    m = len(COSTS)
    e = np.log1p(COSTS) - K
    for mg, cost in zip(s.marginals, COSTS, strict=True):
        assert mg.change.change == pytest.approx(cost, abs=1e-9)
        assert mg.change.n == BLOCKS and mg.change.level == pytest.approx(1 - 0.05 / m)
    for a, effect in zip(s.alone, e, strict=True):
        assert a.change.change == pytest.approx(math.expm1(effect), abs=1e-9)
    assert s.total is not None and s.interaction is not None
    assert s.total.change == pytest.approx(math.expm1(e.sum() + K), abs=1e-9)
    assert s.interaction.change == pytest.approx(math.expm1(-(m - 1) * K), abs=1e-9)
    assert s.interaction.level == 0.95 and s.left_out_blocks == 0
    assert s.interaction_share == pytest.approx(-(m - 1) * K / (e.sum() + K), abs=1e-9)
    assert [(mg.switch, mg.holm_rejects) for mg in s.marginals][:2] == [("s0", True), ("s1", True)]
    assert "Bonferroni-adjusted 95% intervals over 3 switches; Holm's step-down" in s.method


def test_the_waterfall_climbs_from_all_off_to_all_on_largest_switch_first() -> None:
    table = simulate(rng(2), 1, noise=0.0)[0]
    steps = at.waterfall(table, switches())
    gm = {v: math.exp(np.mean(np.log(list(table[v].values())))) for v in (at.ALL_ON, at.ALL_OFF)}
    assert [label for label, _, _ in steps] == ["s0", "s1", "s2", "interaction"]
    assert steps[0][1] == pytest.approx(gm[at.ALL_OFF]) and steps[-1][2] == pytest.approx(gm[at.ALL_ON])
    assert all(a[2] == pytest.approx(b[1]) for a, b in itertools.pairwise(steps))
    assert steps[0][2] / steps[0][1] == pytest.approx(0.90) and steps[2][2] / steps[2][1] == pytest.approx(1.0)
    assert steps[3][2] / steps[3][1] == pytest.approx(math.exp(-2 * K))
    del table[at.ALL_OFF]
    assert at.waterfall(table, switches()) == []


@functools.cache
def coverage(level: float) -> tuple[dict[str, np.ndarray], np.ndarray, list[at.Study]]:
    """Over 2,000 simulated studies (tests/coverage_kit.py's seed): whether each printed interval, or
    family of intervals (all of them at once), holds its truth; and each marginal's own hits."""
    studies = [at.study("throughput", t, switches(), level=level) for t in simulate(kit.rng(20), kit.RUNS)]
    e = np.log1p(COSTS) - K
    marginal = np.array([[covers(mg.change, c) for mg, c in zip(s.marginals, COSTS, strict=True)] for s in studies])
    alone = np.array([[covers(a.change, math.expm1(x)) for a, x in zip(s.alone, e, strict=True)] for s in studies])
    total, inter = math.expm1(e.sum() + K), math.expm1(-(len(COSTS) - 1) * K)
    hits: dict[str, np.ndarray] = {
        "marginals": np.asarray(marginal.all(axis=1)), "alone": np.asarray(alone.all(axis=1)),
        "total": np.array([s.total is not None and covers(s.total, total) for s in studies]),
        "interaction": np.array([s.interaction is not None and covers(s.interaction, inter) for s in studies])}
    return hits, marginal, studies


@kit.LEVELS
@pytest.mark.parametrize("interval", ["marginals", "alone", "total", "interaction"])
def test_each_printed_interval_holds_its_truth_95_percent_of_the_time(interval: str, level: float) -> None:
    # a Bonferroni family holds every true cost at once at least `level` of the time: here about as
    # often (the marginals share all_on's noise), so it is held to the rule as one interval
    hits, _, _ = coverage(level)
    kit.judge(hits[interval], level)


def test_each_bonferroni_interval_holds_its_cost_at_the_adjusted_level_and_holm_finds_a_10_percent_cost() -> None:
    _, marginal, studies = coverage(0.95)
    each = marginal.mean(axis=0)
    print(f"each marginal {each}")
    assert min(each) >= 0.97  # 1 - 0.05/3 = 98.3%
    # power: a switch costing 10% under this noise is found by Holm in nearly every study
    power = np.mean([s.marginals[0].holm_rejects for s in studies])
    print(f"power at -10%: {power:.3f}")
    assert power > 0.90


def fwer_shown_above(rejected: np.ndarray, alpha: float = 0.05) -> tuple[bool, str]:
    """Whether a family-wise error rate above `alpha` is shown: the one-sided 99% lower bound
    (Clopper-Pearson) of the share of studies with any rejection lies above it. Holm's rate is at most
    alpha by the Bonferroni inequality and close to it here (the marginals share all_on's noise, which
    lowers it little at five blocks: 4.8-5.9% over 2,000 studies on five seeds of this file's), so a
    point estimate over any finite number of studies falls above 5% about as often as not; what can be
    asked of a simulation is that it does not show the rate above 5%, and that it would show 7%."""
    from scipy import stats as sps

    k, n = int(np.sum(rejected)), len(rejected)
    low = sps.binomtest(k, n, alternative="greater").proportion_ci(0.99, method="exact").low
    return bool(low > alpha), f"family-wise error {k / n:.2%} of {n} studies (99% lower bound {low:.2%})"


def test_holm_holds_the_family_wise_error_at_5_percent_where_unadjusted_tests_do_not() -> None:
    null = (0.0,) * 8
    studies = [at.study("throughput", t, switches(null)) for t in simulate(kit.rng(21), 4000, costs=null, k=0.0)]
    ps = [[m.p for m in s.marginals] for s in studies]
    holm = np.array([any(m.holm_rejects for m in s.marginals) for s in studies])
    above, said = fwer_shown_above(holm)
    print(f"Holm: {said}")
    assert not above, said
    # the check can tell: Holm asked for a 7% family-wise error is shown above 5%, unadjusted tests far above
    loose = np.array([any(at.holm(p, 0.07)) for p in ps])
    assert fwer_shown_above(loose)[0], fwer_shown_above(loose)[1]
    unadjusted = np.array([any(x <= 0.05 for x in p) for p in ps])
    assert unadjusted.mean() > 0.2, fwer_shown_above(unadjusted)[1]
    # the simultaneous intervals agree: every one holds zero as often as Holm rejects none, or more
    assert np.mean([all(covers(m.change, 0.0) for m in s.marginals) for s in studies]) >= 1 - holm.mean()


def test_holm_steps_down_and_stops_at_the_first_p_it_keeps() -> None:
    assert at.holm([0.01, 0.04, 0.03, 0.5], 0.05) == [True, False, False, False]  # 0.03 > 0.05 / 3
    assert at.holm([0.001, 0.02, 0.012], 0.05) == [True, True, True]
    assert at.holm([math.nan, 0.001], 0.05) == [False, True]


def damaged() -> dict[str, dict[int, float]]:
    table = simulate(rng(5), 1)[0]
    table[at.leave_one_out("s0")][0] = math.nan
    table[at.leave_one_out("s1")][1] = 0.0
    table[at.ALL_OFF][2] = -5.0
    del table[at.leave_one_out("s2")][3]
    return table


def test_a_block_without_a_logarithm_is_left_out_of_its_comparisons_and_counted() -> None:
    s = at.study("throughput", damaged(), switches())
    for mg in s.marginals:
        assert mg.change.n == 4 and mg.change.method.endswith(
            "; 1 block left out (missing, or not finite and positive)"), mg.change.method
    assert s.total is not None and s.total.n == 4 and "1 block left out" in s.total.method
    assert s.interaction is not None and s.interaction.n == 1 and s.left_out_blocks == 4
    assert "4 blocks left out" in s.interaction.method and not s.interaction.bounded
    assert [a.change.n for a in s.alone] == [4, 4, 4]
    text = json.dumps(s.to_json(), allow_nan=False)  # no NaN, no inf: None
    assert json.loads(text)["interaction"]["high"] is None


def test_a_switch_with_one_common_block_has_no_interval_and_is_not_rejected() -> None:
    table = simulate(rng(6), 1)[0]
    table[at.leave_one_out("s0")] = {0: table[at.leave_one_out("s0")][0], 9: 1.0}
    table[at.leave_one_out("s1")] = {}
    s = at.study("throughput", table, switches())
    one, none, fine = s.marginals
    assert one.change.method.startswith("one iteration: no interval") and not one.change.bounded
    assert math.isnan(one.p) and not one.holm_rejects and one.change.n == 1
    assert math.isnan(none.change.change) and none.change.method.startswith("no block holds both")
    assert not none.holm_rejects and s.left_out_blocks == BLOCKS + 1
    assert fine.change.n == BLOCKS and fine.change.level == pytest.approx(1 - 0.05 / 3)  # m counts all three
    assert s.to_json()["marginals"][0]["p"] is None


def test_without_all_off_there_is_no_total_and_without_all_on_no_study() -> None:
    table = simulate(rng(7), 1)[0]
    del table[at.ALL_OFF]
    s = at.study("throughput", table, switches())
    assert s.total is None and s.interaction is None and math.isnan(s.interaction_share)
    assert all(math.isnan(a.change.change) for a in s.alone) and len(s.marginals) == 3
    del table[at.ALL_ON]
    with pytest.raises(ValueError, match="all_on"):
        at.study("throughput", table, switches())
    with pytest.raises(ValueError, match="distinct"):
        at.study("throughput", simulate(rng(7), 1)[0], ["s0", "s0"])


def test_a_latency_that_rises_is_a_cost_and_the_numbers_stay_ratios() -> None:
    table = simulate(rng(8), 1, costs=(0.10, -0.05), noise=0.0)[0]
    s = at.study("p99", table, ["s0", "s1"], higher_is_better=False)
    assert s.marginals[0].change.change == pytest.approx(0.10)
    lines = s.lines()
    assert lines[0].startswith("s0: costs 10.0%") and lines[1].startswith("s1: saves 5.0%")
    up = at.study("throughput", table, ["s0", "s1"]).lines()
    assert up[0].startswith("s0: saves 10.0%") and up[1].startswith("s1: costs 5.0%")
