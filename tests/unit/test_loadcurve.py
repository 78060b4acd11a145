"""Latency against load read back from records: the rate check, the intervals (and their coverage on
simulated boots), the changes against the baseline, the capacity warnings, damage, and every form of
the report that shows it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmharness.analysis import intervals, loadcurve, markdown, publish, report, saturation
from vmharness.bench.openloop import MISS
from vmharness.errors import HarnessError
from vmharness.rundir.histogram import Histogram
from vmharness.rundir.store import RunDir

WHERE = Path("/runs/x/records.jsonl")


def target(peak: float = 1000.0) -> dict[str, Any]:
    return {"kind": "load_target", "instance": "base", "connections": 8, "requests_per_s": peak,
            "rates": {"50": peak / 2}, "from": "test"}


def load(inst: str, pct: int, it: int, rate: float, achieved: float, latencies_us: list[int],
         ok: bool = True) -> dict[str, Any]:
    h = Histogram.of(latencies_us)
    rec: dict[str, Any] = {"kind": "load", "key": f"{inst}/@{pct}%/{it}", "instance": inst, "percent": pct,
                           "iteration": it, "rate": rate, "connections": 8, "ok": ok}
    if ok:
        rec["client"] = {"requests": h.count, "requests_per_s": achieved, "requested_per_s": rate,
                         "errors": {"total": 0}, "latency_us": {**h.summary(), "histogram": h.encode()}}
    return rec


def spread(median: int, n: int = 2000) -> list[int]:
    """n latencies around `median`, 1% of them ten times as slow."""
    return [median] * (n - n // 100) + [10 * median] * (n // 100)


def test_rows_carry_the_rate_the_latency_and_a_paired_change() -> None:
    recs = [target()]
    for it, (b, o) in enumerate([(100, 200), (120, 250), (90, 190)]):
        recs += [load("base", 50, it, 500, 500, spread(b)), load("pti", 50, it, 500, 499, spread(o))]
    la = loadcurve.analyse(recs, "base", WHERE)
    assert la is not None and la.peak == 1000 and la.connections == 8 and not la.flags
    base, pti = la.rows
    assert (base.instance, base.percent, base.requested) == ("base", 50, 500)
    assert base.latency["50"].mean == pytest.approx((100 * 120 * 90) ** (1 / 3))
    assert base.latency["50"].low < base.latency["50"].mean < base.latency["50"].high
    assert base.merged.count == 3 * 2000 and not base.thin("99") and base.thin("99.9")  # 6 beyond p99.9
    change = pti.changes["p50"]
    truth = math.exp(np.mean(np.log([200 / 100, 250 / 120, 190 / 90]))) - 1
    assert change.change == pytest.approx(truth) and change.low < truth < change.high
    assert "paired by iteration" in change.method


@pytest.mark.parametrize(("achieved", "flagged"), [(490.0, False), (510.0, False), (489.0, True), (511.0, True)])
def test_a_rate_more_than_two_percent_off_is_flagged(achieved: float, flagged: bool) -> None:
    recs = [target(), load("base", 50, 0, 500, 500, spread(100)), load("base", 50, 1, 500, achieved, spread(100))]
    la = loadcurve.analyse(recs, "base", WHERE)
    assert la is not None and la.rows[0].missed is flagged
    assert any("did not hold the rate" in f for f in la.flags) is flagged


@given(st.floats(min_value=1.0, max_value=1e6), st.floats(min_value=0.0, max_value=0.5))
def test_the_miss_is_symmetric(rate: float, off: float) -> None:
    def missed(achieved: float) -> bool:
        recs = [target(), load("base", 50, 0, rate, achieved, [100])]
        la = loadcurve.analyse(recs, "base", WHERE)
        assert la is not None
        return la.rows[0].missed
    assert missed(rate * (1 + off)) == missed(rate * (1 - off)) == (off > MISS + 1e-9) or abs(off - MISS) < 1e-6


def test_failed_points_are_flagged_and_a_small_sample_is_thin() -> None:
    recs = [target(), load("base", 25, 0, 250, 250, [100] * 50), load("base", 25, 1, 250, 0, [], ok=False)]
    la = loadcurve.analyse(recs, "base", WHERE)
    assert la is not None
    (row,) = la.rows
    assert row.failed == 1 and row.thin("99") and row.latency["50"].n == 1
    assert any("1 open-loop point(s) failed" in f for f in la.flags)


@pytest.mark.parametrize(("closed", "opened", "warned"), [
    (1250.0, None, ["80% of its capacity"]),      # peak 1000 = 80% of 1250: within
    (1266.0, None, []),                           # 79%: not
    (None, 450.0 / 0.8, ["highest open-loop rate"]),
    (None, 450.0 / 0.79, []),
])
def test_the_capacity_warning(closed: float | None, opened: float | None, warned: list[str]) -> None:
    cap = {"kind": "capacity", "machine": "c1", "closed_per_s": closed, "open_per_s": opened, "error": None}
    said = loadcurve.capacity_flags([cap], 1000.0, 450.0)
    assert len(said) == len(warned) and all(w in s for w, s in zip(warned, said, strict=True))


def test_a_client_not_measured_is_said_and_two_clients_share_the_peak() -> None:
    caps: list[dict[str, Any]] = [
        {"kind": "capacity", "machine": "a", "closed_per_s": 600.0, "open_per_s": None, "error": None},
        {"kind": "capacity", "machine": "b", "error": "nginx is not installed"}]
    flags = loadcurve.capacity_flags(caps, 1000.0, 0.0)
    assert any(f.startswith("client a: the baseline's peak on it, 500 req/s, is 83%") for f in flags)
    assert "client b: its capacity was not measured (nginx is not installed)" in flags


@pytest.mark.parametrize("damage", [
    {"percent": "fifty"}, {"client": {"requests_per_s": 1}}, {"rate": None}, {"client": "x"},
])
def test_a_damaged_record_is_one_error_naming_it(damage: dict[str, Any]) -> None:
    rec = {**load("base", 50, 0, 500, 500, [100]), **damage}
    with pytest.raises(HarnessError) as err:
        loadcurve.analyse([target(), rec], "base", WHERE)
    assert err.value.message.startswith(f"{WHERE}: the load record 'base/@50%/0' is damaged")


def test_a_run_without_open_loop_load_has_none() -> None:
    assert loadcurve.analyse([{"kind": "measurement"}], "base", WHERE) is None
    with pytest.raises(HarnessError, match="load_target record"):
        loadcurve.analyse([{"kind": "load_target", "instance": "base"}], "base", WHERE)


def test_the_geometric_interval_holds_the_truth_about_95_percent_of_the_time() -> None:
    """Each boot's p99 is lognormal around a true median (boots differ multiplicatively); the interval
    on 3 and on 6 boots' logs holds that median in about 95% of 400 simulated runs."""
    rng = np.random.default_rng(7)
    for boots in (3, 6):
        held = 0
        for _ in range(400):
            values = list(5000 * np.exp(rng.normal(0, 0.8, boots)))
            iv = intervals.log_interval(values)
            held += iv.low <= 5000 <= iv.high
            assert iv.low > 0
        assert 0.90 <= held / 400 <= 0.99, (boots, held)


def test_every_form_of_the_report_shows_it(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {"kind": "bench", "config": {"instance": [{"name": "base"},
                                                                                     {"name": "pti"}]}})
    for it in range(2):
        for inst, rps in (("base", 1000.0), ("pti", 800.0)):
            h = Histogram.of(spread(300 if inst == "base" else 500))
            run.append({"kind": "measurement", "key": f"{inst}/8/{it}", "instance": inst, "connections": 8,
                        "iteration": it, "ok": True,
                        "client": {"requests_per_s": rps + it, "requests": h.count, "errors": {"total": 0},
                                   "latency_us": {**h.summary(), "histogram": h.encode()}}})
    run.append({"kind": "capacity", "machine": "local", "closed_per_s": 1100.0, "open_per_s": 5000.0, "error": None})
    run.append(target(1000.5))
    for it in range(2):
        run.append(load("base", 50, it, 500, 500, spread(100 + it)))
        run.append(load("pti", 50, it, 500, 470, spread(200 + it)))
    a = saturation.analyse(run)
    assert a.load is not None and any("pti at 50% of the peak" in f for f in a.flags)
    assert any(f.startswith("client local: the baseline's peak on it, 1,000 req/s, is 91%") for f in a.flags)
    text = report.text(a)
    assert "LATENCY AGAINST LOAD" in text and "470 !" in text
    assert text.index("WARNING: pti at 50%") > text.index("LATENCY AGAINST LOAD")  # beside the figures it concerns
    assert "percent_of_peak" in markdown.render(a)
    data = json.loads(json.dumps(report.to_json(a)))
    assert [p["instance"] for p in data["load"]["points"]] == ["base", "pti"]
    assert data["load"]["points"][1]["rate_missed"] is True
    files = publish.publish(a, tmp_path / "out", "test")
    names = {f.name for f in files}
    assert {"latency-load.png", "latency-load.svg", "report-load.csv"} <= names
    assert "percent_of_peak" in (tmp_path / "out" / "report-load.csv").read_text()
    assert "LATENCY AGAINST LOAD" in (tmp_path / "out" / "report.html").read_text()
