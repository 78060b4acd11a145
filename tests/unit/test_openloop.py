"""The open-loop load's pure parts: oha's command, the client-side summary (run by the real awk on
CSV shaped as oha writes it), the result read back, the target and the points planned from records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmharness.bench import at_peak, clients, openloop, plan
from vmharness.errors import HarnessError
from vmharness.model import derived
from vmharness.model.rules import validate
from vmharness.model.sections import (
    BenchConfig,
    ControlSection,
    InstanceSection,
    LoadSection,
    RunConfig,
    SweepSection,
)
from vmharness.rundir.histogram import Histogram
from vmharness.system.machine import Machine

HEADER = "request-start,DNS,DNS+dialup,Response-delay,request-duration,bytes,status\n"


def summarize(csv: str) -> str:
    """SUMMARY as the client runs it: the real awk, reading oha's CSV."""
    return subprocess.run(["awk", "-v", f"marker={openloop.MARKER}", openloop.SUMMARY], input=csv, text=True,
                          capture_output=True, check=True).stdout


def rows(latencies_s: list[float], status: int = 200, size: int = 64) -> str:
    return "".join(f"{i * 0.001:.9f},0,0,{d / 2:.9f},{d:.9f},{size},{status}\n" for i, d in enumerate(latencies_s))


def test_the_command_is_paced_and_corrected_only_with_a_rate() -> None:
    paced = openloop.OpenRun("http://h/", 1234.5, 8, 3, 10).argv("/x/oha")
    oha = paced[paced.index("/x/oha"):]
    assert oha[oha.index("-q") + 1] == "1234.500" and "--latency-correction" in oha and "-w" in oha
    assert oha[-1] == "http://h/" and oha[oha.index("-c") + 1] == "8" and oha[oha.index("-z") + 1] == "3s"
    assert paced[:3] == ["sh", "-c", openloop.PIPE]  # the URL and binary are arguments, never code
    free = openloop.OpenRun("http://h/", 0, 8, 3, 10).argv()
    assert "-q" not in free and "--latency-correction" not in free


@given(st.lists(st.floats(min_value=1e-6, max_value=5.0, allow_nan=False), min_size=1, max_size=300))
@settings(max_examples=40, deadline=None)
def test_the_client_side_summary_is_the_histogram_of_every_row(latencies: list[float]) -> None:
    run = openloop.OpenRun("http://h/", 100.0, 4, 2, 10)
    got = run.parse(summarize(HEADER + rows(latencies)))
    truth = Histogram.of(np.floor(np.array(latencies) * 1e6 + 1e-9) // 1)
    h = Histogram.decode(got["latency_us"]["histogram"])
    assert h.count == len(latencies) == got["requests"]
    # awk truncates each latency to its microsecond as the Histogram does (floats that land on an
    # exact microsecond may round either way: within one)
    assert abs(h.percentile(50) - truth.percentile(50)) <= 1 and abs(h.percentile(99) - truth.percentile(99)) <= 1
    assert got["bytes"] == 64 * len(latencies)


def test_the_result_counts_answers_errors_and_what_went_unanswered() -> None:
    run = openloop.OpenRun("http://h/", 1000.0, 4, 2, 10)  # 2000 scheduled
    csv = HEADER + rows([0.001] * 1900) + rows([0.002] * 60, status=503, size=0)
    got = run.parse(summarize(csv))
    assert got["requests"] == 1960 and got["requests_per_s"] == 980.0 and got["requested_per_s"] == 1000.0
    assert got["errors"]["status"] == 60 and got["errors"]["total"] == 60 and got["unanswered"] == 40
    assert got["status"] == {"200": 1900, "503": 60}
    assert openloop.off(got["requests_per_s"], run.rate) == pytest.approx(-0.02)


@pytest.mark.parametrize(("stdout", "stderr", "said"), [
    ("", "error: Connection refused", "oha produced no result: error: Connection refused"),
    (f"{openloop.MARKER} 0 0\n", "", "oha got no answer"),
    (f"{openloop.MARKER} 2 10\nH x 2\n", "", "oha's summary is damaged"),
    (f"{openloop.MARKER} 2 10\nH 5 0\n", "", "a count of 0"),
    (f"{openloop.MARKER} 2 10\nH 5 1\nH 5 1\n", "", "a latency twice"),
])
def test_a_damaged_or_empty_summary_is_one_error(stdout: str, stderr: str, said: str) -> None:
    with pytest.raises(HarnessError) as err:
        openloop.OpenRun("http://h/", 10.0, 1, 1, 1).parse(stdout, stderr)
    assert said in err.value.message


def test_the_rate_and_connections_are_shared_out_alike() -> None:
    cs = [clients.Client(Machine(None)), clients.Client(Machine(None)), clients.Client(Machine(None))]
    runs = clients.open_runs(cs, "http://h/", 10, 1000.0, 2, 5)
    loads = [r.run for r in runs if isinstance(r.run, openloop.OpenRun)]
    assert len(loads) == 3 and [x.connections for x in loads] == [4, 3, 3]
    assert sum(x.rate for x in loads) == pytest.approx(1000.0)
    assert [x.rate for x in loads] == pytest.approx([400.0, 300.0, 300.0])


def measurement(inst: str, c: int, it: int, rps: float, ok: bool = True) -> dict[str, object]:
    return {"kind": "measurement", "key": f"{inst}/{c}/{it}", "instance": inst, "connections": c, "iteration": it,
            "ok": ok, "client": {"requests_per_s": rps}}


def bench_cfg(percents: tuple[int, ...] = (25, 50)) -> BenchConfig:
    return validate(BenchConfig(instance=(InstanceSection("base"), InstanceSection("other")),
                                sweep=SweepSection(connections="4,8", iterations=2),
                                load=LoadSection(percents=percents)))


def test_the_target_is_the_baseline_highest_mean_and_is_fixed_once_written() -> None:
    cfg = bench_cfg()
    recs = [measurement("base", 4, 0, 100), measurement("base", 8, 0, 150), measurement("base", 8, 1, 130),
            measurement("base", 4, 1, 190), measurement("other", 8, 0, 999), measurement("base", 16, 0, 900, ok=False)]
    target = at_peak.new_target(cfg, recs)
    assert target is not None and target["connections"] == 4 and target["requests_per_s"] == 145
    assert target["rates"] == {"25": 36.25, "50": 72.5}
    assert at_peak.load_points(cfg, recs) == []  # nothing before the target is written
    points = at_peak.load_points(cfg, [*recs, target])
    assert [p.key for p in points] == ["base/@25%/0", "base/@50%/0", "other/@25%/0", "other/@50%/0",
                                       "other/@25%/1", "other/@50%/1", "base/@25%/1", "base/@50%/1"]
    assert {p.connections for p in points} == {4}
    done = {"kind": "load", "key": "base/@25%/0", "ok": True}
    failed = {"kind": "load", "key": "base/@50%/0", "ok": False}
    left = at_peak.load_points(cfg, [*recs, target, done, failed], iteration=0)
    assert [p.key for p in left] == ["base/@50%/0", "other/@25%/0", "other/@50%/0"]
    assert at_peak.new_target(bench_cfg(()), recs) is None
    assert at_peak.new_target(cfg, [measurement("other", 4, 0, 5)]) is None
    assert plan.planned(cfg) == 2 * 2 * 2 + 2 * 2 * 2


def test_a_run_loads_every_instance_but_its_control() -> None:
    cfg = RunConfig(instance=(InstanceSection("base"), InstanceSection("pti"), InstanceSection("control")),
                    control=ControlSection(cap=50))
    assert derived.loaded(cfg) == ["base", "pti"]
    plain = RunConfig(instance=(InstanceSection("base"), InstanceSection("control")))
    assert derived.loaded(plain) == ["base", "control"]


def test_a_local_oha_is_found_beside_this_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each answer told apart: "oha" as given is also the answer when none is found anywhere."""
    venv, on_path = tmp_path / "venv" / "bin", tmp_path / "path"
    venv.mkdir(parents=True)
    on_path.mkdir()
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    assert openloop.local_binary("/opt/oha") == "/opt/oha"  # a path: as given, found or not
    assert openloop.local_binary("oha") == "oha"  # nowhere: left to fail by name when run
    (venv / "oha").write_text("#!/bin/sh\n")
    (venv / "oha").chmod(0o755)
    assert openloop.local_binary("oha") == str(venv / "oha")  # beside this Python
    (on_path / "oha").write_text("#!/bin/sh\n")
    (on_path / "oha").chmod(0o755)
    assert openloop.local_binary("oha") == "oha"  # on PATH: PATH's, by name
