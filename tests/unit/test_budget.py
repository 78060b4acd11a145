"""The adaptive search's rounds and measurements per round at its peak, planned from the pilot's noise
split (vmharness/bench/budget.py): the plan's known answers, and the coverage of the peak's interval
when the number of values is chosen that way, on simulated runs with a known split."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests import coverage_kit
from vmharness import stats
from vmharness.analysis.cells import Cell
from vmharness.bench import budget
from vmharness.model import config, sections

COUNTS = (8, 16, 32)  # the focus (16) and its measured neighbours
STREAM = 300  # coverage_kit's streams of these tests: 300, 301, 302


def _cfg(**sweep: Any) -> sections.RunConfig:
    body = {"instance": [{"name": "base"}], "sweep": {"connections": "8,16,32", "search": "adaptive",
                                                      "iterations": 3, "duration": 3, "wait": 0.5, **sweep}}
    return config.run_from_json(body)


def _records(values: dict[tuple[int, int], list[float]], boot: float) -> list[dict[str, Any]]:
    """(round, count) -> measured throughputs, as a run's records, with sessions that took `boot` s."""
    out: list[dict[str, Any]] = [{"kind": "session", "ok": True, "iteration": k, "boot_seconds": boot}
                                 for k in sorted({k for k, _ in values})]
    for (k, c), vs in values.items():
        out += [{"kind": "measurement", "ok": True, "instance": "base", "iteration": k, "connections": c,
                 "client": {"requests_per_s": v}} for v in vs]
    return out


def _split(between: float, within: float) -> stats.Split:
    return stats.Split(2, 3, between, within, 0.5, 0.0, 1.0, 0.95)


def test_repeats_pay_only_while_a_round_is_dear_and_its_shift_small() -> None:
    # TCG here: boots 11.8% apart, measurements 3%, a boot 20 s against 3.5 s a point: one per boot
    assert budget.efficient_repeats(_split(0.118, 0.03), 20.0, 3.5) == 1
    # boots alike (0.5%), measurements 2% apart: the boot's 60 s buys several measurements of 31 s
    assert budget.efficient_repeats(_split(0.005, 0.02), 60.0, 31.0) == 6
    assert budget.efficient_repeats(_split(0.0, 0.02), 0.0, 31.0) == 1  # a round that costs nothing


def test_the_plan_waits_for_the_whole_pilot_and_needs_two_counts_in_both_rounds() -> None:
    cfg, pilot = _cfg(), [8, 16]
    assert budget.plan(cfg, _records({(0, c): [1000.0] for c in COUNTS}, 20.0), pilot) is None
    one = {(0, 16): [1000.0], (1, 16): [990.0], (0, 8): [900.0]}
    assert budget.plan(cfg, _records(one, 20.0), pilot) is None  # the pilot has not measured 8 yet
    two = {**one, (1, 8): [880.0]}
    assert budget.plan(cfg, _records(two, 20.0), pilot) is not None
    assert budget.plan(cfg, _records(two, 20.0), [8, 16, 32]) is None
    failed = [*_records(one, 20.0), {"kind": "measurement", "ok": False, "instance": "base", "iteration": 1,
                                     "connections": 8}]
    assert budget.plan(cfg, failed, pilot) is None  # tried, but one count in both rounds cannot be split


def test_out_of_reach_the_search_spends_the_grids_rounds_and_says_so() -> None:
    # the second boot 12% slower at every count, the counts 3% apart within a boot
    pilot = {(k, c): [1000.0 * (1 - 0.12 * k) * (1 + d)] for k in (0, 1) for c, d in zip(COUNTS, (0.03, 0.0, -0.03),
                                                                                           strict=True)}
    pilot[(1, 16)] = [880.0 * 1.03]
    got = budget.plan(_cfg(), _records(pilot, 20.0), list(COUNTS))
    assert got is not None and not got.reached and (got.rounds, got.repeats) == (3, 1)
    assert got.line("boot").startswith("the pilot boot: boots differ by ")
    assert "±2.0% at the peak is out of reach within sweep.max_iterations, so 3 boots of 1 measurement" in got.line(
        "boot")


def test_within_reach_the_plan_is_the_reports_own() -> None:
    pilot = {(k, c): [1000.0 * (1 + 0.001 * k + d)] for k in (0, 1) for c, d in zip(COUNTS, (0.0, 0.01, -0.01),
                                                                                        strict=True)}
    pilot[(1, 16)] = [1000.0 * 1.0105]
    cfg = _cfg(until_ci=0.05)
    got = budget.plan(cfg, _records(pilot, 60.0), list(COUNTS))
    assert got is not None and got.reached
    table = np.array([[pilot[(k, c)][0] for c in COUNTS] for k in (0, 1)])
    split = stats.split(table)
    assert split is not None
    best = stats.plan(split, 0.05, 60.0, 3.5)
    assert best is not None and (got.rounds, got.repeats) == (max(best.blocks, 3), best.repeats)
    assert got.values == 2 + (got.rounds - 2) * got.repeats


def test_a_cells_interval_rests_on_one_value_per_boot() -> None:
    cell = Cell(rps=[100.0, 102.0, 110.0, 90.0], blocks=[("r", 0), ("r", 1), ("r", 1), ("r", 2)])
    assert cell.values() == [100.0, 106.0, 90.0]
    assert cell.interval() == stats.mean_interval([100.0, 106.0, 90.0])


def _covered(rng: np.random.Generator, between: float, within: float, boot: float, cfg: sections.RunConfig,
             level: float) -> bool:
    """One simulated search at a flat top of 1000 req/s: the ladder's round and the pilot at three
    counts, then the rounds the plan asks for at the focus; whether the focus's interval holds 1000."""
    shifts = rng.normal(0, between, cfg.sweep.max_iterations)
    pilot = {(k, c): [1000.0 * (1 + shifts[k] + rng.normal(0, within))] for k in (0, 1) for c in COUNTS}
    planned = budget.plan(cfg, _records(pilot, boot), list(COUNTS))
    assert planned is not None
    means = [pilot[(k, 16)][0] for k in (0, 1)]
    for k in range(2, planned.rounds):
        means.append(float(np.mean(1000.0 * (1 + shifts[k] + rng.normal(0, within, planned.repeats)))))
    iv = stats.mean_interval(means, level)
    return iv.low <= 1000.0 <= iv.high


@coverage_kit.LEVELS
@pytest.mark.parametrize(("between", "within", "boot", "stream"), [
    (0.118, 0.03, 20.0, 0),  # TCG here: out of reach, three boots of one
    (0.004, 0.03, 60.0, 1),  # boots alike: the plan buys repeats within few boots
    (0.02, 0.02, 0.0, 2),  # a bench: rounds cost nothing
])
def test_the_peaks_interval_covers_when_the_pilot_chose_how_many_values(between: float, within: float, boot: float,
                                                                        stream: int, level: float) -> None:
    """The coverage rule (tests/coverage_kit.py) on 2,000 searches of each kind, drawn from streams of
    its seed: how many values the point gets depends on the pilot, which its interval includes."""
    cfg = _cfg(until_ci=0.02, max_iterations=10)
    rng = coverage_kit.rng(STREAM + stream)
    coverage_kit.judge(np.array([_covered(rng, between, within, boot, cfg, level) for _ in range(coverage_kit.RUNS)]),
                       level)
