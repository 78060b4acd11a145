"""The adaptive sweep's plan (vmharness/bench/plan.py) driven to its end on synthetic throughput, as a
bench (every instance at each point) and as a run (a boot per instance and iteration, the control
riding on the baseline's): what it measures, in what order, and when it stops."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from vmharness.bench import budget, plan, search
from vmharness.experiment.boots import rides, sessions
from vmharness.model import config, derived, sections


def _cfg(kind: str = "bench", **sweep: Any) -> sections.BenchConfig:
    body = {"instance": [{"name": "base"}, {"name": "slow"}],
            "sweep": {"connections": "16:1536:16", "search": "adaptive", "iterations": 3, **sweep}}
    return config.run_from_json(body) if kind == "run" else config.from_json(body)


def _curve(c: int) -> float:
    """Throughput rising to a peak at 700 connections, then falling slowly."""
    return 100_000.0 * math.exp(-0.5 * (math.log(c / 700) / 0.8) ** 2)


def _record(p: plan.Point, value: float | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": "measurement", "key": p.key, "instance": p.instance,
                           "connections": p.connections, "iteration": p.iteration, "ok": value is not None}
    if value is not None:
        rec["client"] = {"requests_per_s": value}
    return rec


def _bench(cfg: sections.BenchConfig, measure: Callable[[plan.Point], float | None]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    todo = plan.todo(cfg, records, set())
    while todo:
        assert len(records) < 500, "the plan does not end"
        records += [_record(p, measure(p)) for p in todo]
        todo = plan.adaptive(cfg, records)
    return records


def _noisy(seed: int, sd: float) -> Callable[[plan.Point], float | None]:
    rng = np.random.default_rng(seed)
    return lambda p: _curve(p.connections) * (0.8 if p.instance == "slow" else 1.0) * (1 + rng.normal(0, sd))


def test_the_search_walks_the_baselines_ladder_with_every_instance_at_each_count() -> None:
    cfg = _cfg()
    records = _bench(cfg, _noisy(1, 0.0))
    first = [r for r in records if r["iteration"] == 0]
    counts = [r["connections"] for r in first if r["instance"] == "base"]
    assert counts[:4] == [16, 32, 64, 128]  # the ladder from the smallest count of the range
    assert [r["connections"] for r in first if r["instance"] == "slow"] == counts  # paired, point by point
    assert search.peak_count(plan.curve(cfg, records)) in range(600, 820)  # the peak at 700, within resolution
    assert len(counts) <= 12  # against the grid's 96 counts


def _at(records: list[dict[str, Any]], name: str, count: int) -> list[float]:
    return [r["client"]["requests_per_s"] for r in records if r["connections"] == count and r["instance"] == name
            and r["ok"]]


def test_rounds_go_to_the_peak_as_many_as_the_pilots_noise_split_plans() -> None:
    cfg = _cfg(until_ci=0.02, max_iterations=8)
    records = _bench(cfg, _noisy(2, 0.01))
    counts = {r["connections"] for r in records}
    means = {c: float(np.mean(_at(records, "base", c))) for c in counts}
    peak = max(means, key=lambda c: means[c])
    seen = sorted(plan.curve(cfg, records))
    pilot = {r["connections"] for r in records if r["iteration"] == budget.PILOT}
    assert peak in pilot and len(pilot) == 3 and pilot <= set(seen)  # the peak and its measured neighbours
    assert pilot == set(budget.pilot_counts(seen, sorted(pilot)[1]))
    later = [r for r in records if r["iteration"] > budget.PILOT]
    assert later and {r["connections"] for r in later} == {peak}
    for c in counts:  # whole rounds: every instance in each
        assert len(_at(records, "base", c)) == len(_at(records, "slow", c))
    planned = plan.planned_budget(cfg, records)
    # 1% noise within, none between rounds: +-2% takes four rounds of one (t(3) x 1% / 2 = 1.6%)
    assert planned is not None and planned.reached and (planned.rounds, planned.repeats) == (4, 1)
    assert [len(_at(records, n, peak)) for n in ("base", "slow")] == [planned.values] * 2 == [4, 4]
    # the order within each round rotates, as the grid's does
    firsts = [next(r["instance"] for r in records if r["iteration"] == k) for k in (1, 2)]
    assert firsts == ["slow", "base"]


def test_a_ladder_point_high_by_luck_gets_rounds_until_the_focus_comes_back() -> None:
    """A flat top (1000 req/s from 64 on) with noise ±1%; the first measurements at 128 and 256 are 10%
    and 5% high. The search's best, 128, gets the pilot with its neighbours; its mean falls below 256's,
    and the rounds go where the highest mean then is: the report calls that count the peak."""
    cfg = _cfg(until_ci=0.02)
    rng = np.random.default_rng(5)

    def measure(p: plan.Point) -> float:
        luck = {(128, 0, "base"): 1.1, (256, 0, "base"): 1.05}
        lucky = luck.get((p.connections, p.iteration, p.instance), 1.0)
        return min(p.connections, 64) / 64 * 1000.0 * lucky * (1 + rng.normal(0, 0.01))
    records = _bench(cfg, measure)
    assert len(_at(records, "base", 128)) >= 2 and len(_at(records, "base", 256)) >= 2
    means = {c: float(np.mean(_at(records, "base", c))) for c in {r["connections"] for r in records}}
    top = max(means, key=lambda c: means[c])
    planned = plan.planned_budget(cfg, records)
    assert planned is not None and len(_at(records, "base", top)) >= planned.values


def test_a_target_out_of_reach_stops_at_sweep_iterations_not_at_the_cap() -> None:
    """±0.1% under 5% noise would need hundreds of rounds: chasing it to max_iterations would still
    miss, so the search spends the grid's sweep.iterations rounds and says why."""
    cfg = _cfg(until_ci=0.001, max_iterations=8)
    records = _bench(cfg, _noisy(3, 0.05))
    rounds: dict[int, set[int]] = {}
    for r in records:
        rounds.setdefault(r["connections"], set()).add(r["iteration"])
    assert max(len(its) for its in rounds.values()) == cfg.sweep.iterations == 3
    planned = plan.planned_budget(cfg, records)
    assert planned is not None and not planned.reached and planned.repeats == 1  # a round costs nothing here
    todo, why = plan.after_round(cfg, [r for r in records if r["iteration"] <= budget.PILOT])
    assert todo and why is not None and "±0.1% at the peak is out of reach within sweep.max_iterations" in why
    assert why.startswith("the pilot round: rounds differ by ")


def test_a_failed_point_is_not_asked_for_again_and_the_search_still_ends() -> None:
    cfg = _cfg()
    records = _bench(cfg, lambda p: None if p.connections == 64 else _curve(p.connections))
    assert sum(r["key"] == "base/64/0" for r in records) == 1
    assert plan.curve(cfg, records)[64] == 0.0


def test_a_resumed_search_asks_for_what_the_uninterrupted_one_would() -> None:
    cfg = _cfg()
    whole = _bench(cfg, _noisy(4, 0.0))
    for cut in (1, 5, 11):
        nxt = plan.adaptive(cfg, whole[:cut])
        assert nxt and nxt[0].key == whole[cut]["key"]


def _run(cfg: sections.RunConfig, measure: Callable[[plan.Point], float], boot_seconds: float | None = None
         ) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """The plan driven as Runner._measure drives it: a boot per session (recorded with `boot_seconds`, what
    the budget plans with, if given), and in each boot what the search wants of that boot's iteration and
    instances next (Runner._more). The records and the boots."""
    riding = rides(cfg)
    records: list[dict[str, Any]] = []
    boots: list[tuple[int, str]] = []
    todo = plan.todo(cfg, records, set())
    while todo:
        assert len(records) < 500, "the plan does not end"
        for s in sessions(todo, riding):
            tried = {r.get("key") for r in records}
            if all(p.key in tried for p in s.points):
                continue
            boots.append((s.iteration, s.instance))
            if boot_seconds is not None:
                records.append({"kind": "session", "instance": s.instance, "iteration": s.iteration, "ok": True,
                                "boot_seconds": boot_seconds})
            points = list(s.points)
            while points:
                records += [_record(p, measure(p)) for p in points if p.key not in tried]
                tried = {r.get("key") for r in records}
                points = [p for p in plan.adaptive(cfg, records)
                          if p.iteration == s.iteration and riding.get(p.instance, p.instance) == s.instance]
        todo = plan.adaptive(cfg, records)
    return records, boots


def test_a_run_walks_the_ladder_in_the_baselines_boot_then_boots_each_other_instance_once() -> None:
    cfg = derived.with_control(config.run_from_json(
        {"instance": [{"name": "base"}, {"name": "slow"}], "control": {"cap": 80},
         "sweep": {"connections": "16:1536:16", "search": "adaptive", "iterations": 3}}))
    assert isinstance(cfg, sections.RunConfig) and [i.name for i in cfg.instance] == ["base", "slow", "control"]
    records, boots = _run(cfg, lambda p: _curve(p.connections))
    assert boots[:2] == [(0, "base"), (0, "slow")]  # one boot each for the whole ladder
    assert all(it > 0 for it, _ in boots[2:])
    assert sorted(boots) == sorted(set(boots))  # never two boots of an instance in one iteration
    ladder = [r["connections"] for r in records if r["instance"] == "base" and r["iteration"] == 0]
    for other in ("slow", "control"):
        # the control, in the baseline's boot, follows its ladder point by point; the other, in its own
        got = sorted(r["connections"] for r in records if r["instance"] == other and r["iteration"] == 0)
        assert got == sorted(ladder)


def _guest_cfg() -> sections.RunConfig:
    """One instance, adaptive, on time_to_answer.py --guest's range (where one TCG vCPU saturates)."""
    cfg = config.run_from_json({"instance": [{"name": "base"}],
                                "sweep": {"connections": "1:8:1,8:32:4,32:64:8", "search": "adaptive",
                                          "iterations": 3}})
    assert isinstance(cfg, sections.RunConfig)
    return cfg


# A guest's flat top under TCG, as benchmarks/time_to_answer.py --guest measured it (req/s by count, a
# boot each round): the focus moves after the pilot, to 10, then to 21, measured once, then back to 12.
TCG_FLAT = {0: {1: 1674, 2: 1736, 4: 1685, 8: 1850, 16: 1950, 32: 1904, 64: 1633, 21: 1813, 12: 2017, 10: 1969,
                13: 1797, 11: 1684},
            1: {11: 1415, 12: 1570, 13: 1507, 10: 1687, 16: 1618, 32: 1609, 8: 1687},
            2: {10: 1493, 21: 1572, 12: 1850}}


def test_a_focus_that_moves_after_the_pilot_is_measured_in_the_boot_that_is_up() -> None:
    """Where the highest mean moves to a count the current round has not measured, that round measures it:
    in a run, the boot up now. Going back to the first round it lacks would boot that round's guest
    again for one measurement (it did: five boots where three do)."""
    cfg = _guest_cfg()
    records, boots = _run(cfg, lambda p: TCG_FLAT.get(p.iteration, {}).get(p.connections, 1600.0))
    assert boots == [(0, "base"), (1, "base"), (2, "base")]
    assert [r["connections"] for r in records if r["iteration"] == 2] == [10, 21, 12]


def _flat(rng: np.random.Generator) -> Callable[[plan.Point], float]:
    """A curve flat from the first count, each measurement 5% noisy."""
    return lambda p: 1000.0 * (1 + rng.normal(0, 0.05))


def test_after_the_pilot_a_count_gets_its_second_value_alone_then_rounds_of_the_planned_repeats() -> None:
    """Boots dear (60 s) and measurements noisy (5%): the pilot plans several measurements a round. When
    the highest mean moves to a count measured once, that count takes one value in the boot that is up,
    as the pilot would have given it, and the planned repeats only in a later boot: a lucky value is
    not answered with a round of repeats (seed 3 moves so; the others keep the rule where they do not)."""
    cfg = _guest_cfg()
    moved = 0
    for seed in range(6):
        records, boots = _run(cfg, _flat(np.random.default_rng(seed)), boot_seconds=60.0)
        assert sorted(boots) == sorted(set(boots))  # never a round's guest booted twice
        planned = plan.planned_budget(cfg, records)
        assert planned is not None
        rounds: dict[int, list[int]] = {}
        for r in plan.measurements(records):
            rounds.setdefault(r["connections"], []).append(r["iteration"])
        for c, its in rounds.items():
            for k in sorted(set(its)):
                had = len({j for j in its if j < k})
                assert its.count(k) == (planned.repeats if k > budget.PILOT and had > budget.PILOT else 1), (seed, c)
                moved += k > budget.PILOT and had <= budget.PILOT and planned.repeats > 1
    assert moved  # the rule was exercised
