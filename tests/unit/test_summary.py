"""The answer at a glance (analysis/summary.py): one table first in every form (terminal, Markdown, HTML,
the JSON's `summary`), held against a recording on two recorded runs: the demo's (TCG, two boots: its
warnings void the answer) and an attribution study's (tests/unit/test_studies.py's run of known
content). Re-record on purpose with VMHARNESS_GOLDEN_UPDATE=1, and read the difference."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.unit.test_studies import _run as study_run
from vmharness.analysis import intervals, latex, markdown, page, report, saturation, summary
from vmharness.analysis.saturation import Analysis
from vmharness.rundir.store import RunDir
from vmharness.textsafe import json_text

GOLDEN = Path(__file__).parent / "golden" / "summary"
RUNS = Path(__file__).parent / "golden" / "runs"
UPDATE = os.environ.get("VMHARNESS_GOLDEN_UPDATE") == "1"
ROOT = Path(__file__).parents[2]


def _demo(tmp_path: Path) -> Path:
    with tarfile.open(RUNS / "run.tar.xz") as t:
        t.extractall(tmp_path / "run", filter="data")
    return tmp_path / "run"


def _analysed(name: str, tmp_path: Path) -> Analysis:
    run = _demo(tmp_path) if name == "demo" else study_run(tmp_path).path
    return saturation.analyse(RunDir.open(run))


def _forms(a: Analysis) -> dict[str, str]:
    s = summary.build(a)
    return {"txt": "\n".join(report.answer_lines(s)) + "\n", "md": "\n".join(markdown.answer(s)) + "\n",
            "html": "".join(page.answer(s)) + "\n", "json": json_text(s) + "\n", "tex": latex.render(s)}


@pytest.mark.parametrize("name", ["demo", "study"])
def test_the_table_is_as_recorded_in_every_form(name: str, tmp_path: Path) -> None:
    for form, got in _forms(_analysed(name, tmp_path)).items():
        path = GOLDEN / f"{name}.{form}"
        if UPDATE:
            GOLDEN.mkdir(parents=True, exist_ok=True)
            path.write_text(got)
        assert got == path.read_text(), f"{path} differs: VMHARNESS_GOLDEN_UPDATE=1 re-records it"


@pytest.mark.parametrize("name", ["demo", "study"])
def test_every_form_begins_with_the_table(name: str, tmp_path: Path) -> None:
    a = _analysed(name, tmp_path)
    s, forms = summary.build(a), _forms(a)
    assert json.loads(json.dumps(s)) == s  # plain data: JSON as it is
    assert report.text(a).startswith(forms["txt"])
    assert report.short(a, []).startswith(forms["txt"].rstrip("\n"))
    assert markdown.render(a).startswith(forms["md"].rstrip("\n"))
    warnings, lead, _notes = page.answer(s)
    assert f"</h1>{warnings}<div class=\"first\">{lead}" in page.render(a, "t", [])
    assert report.to_json(a)["summary"] == json.loads(json_text(s))


def test_a_study_says_each_switch_once_as_the_cost_of_turning_it_on(tmp_path: Path) -> None:
    """no-pti against the reference (+25%) and pti's cost (-20%) are one fact: the table says it once, as
    the cost of turning pti on, and gives none of the study's own instances a row."""
    a = _analysed("study", tmp_path)
    rows = {r["name"]: r for r in summary.build(a)["rows"]}
    assert set(rows) == {"pti", "spectre_v2", "all switches", "mds", "spectre_v1"}
    assert a.changes["no-pti"]["throughput"].change > 0
    pti = rows["pti"]
    assert (pti["on"], pti["off"], pti["kind"]) == ("on", "no-pti", "switch")
    assert math.isclose(pti["throughput"]["change"], -0.2) and pti["verdict"] == "a change by Holm"
    assert rows["spectre_v2"]["verdict"].startswith("no change detected (it could have seen ±")
    assert rows["mds"]["verdict"].startswith("left out: dropped") and rows["mds"]["throughput"] is None


def test_the_warnings_that_void_the_answer_stand_above_it_with_what_to_do(tmp_path: Path) -> None:
    a = _analysed("demo", tmp_path)
    s = summary.build(a)
    assert [w["text"].split(":")[0] for w in s["warnings"]] == [
        "the positive control was not detected", "not saturated", "no KVM"]
    assert len(s["warnings"]) + len(s["notes"]) + len(s["on_curve"]) == len(a.flags)
    # the curve's own (its peak at the sweep's end, not distinct, noisy) beside the baseline's peak line
    assert [f.split(" (")[0].split(":")[0] for f in s["on_curve"]] == [
        "the throughput peaks at the largest count", "the peak is not distinct", "noisy"]
    full = report.text(a)
    assert full.index("\nbaseline baseline: saturation point") < full.index("\n  WARNING: the peak is not distinct")
    short = report.short(a, ["the full text: vmharness report run --full"]).split("\n")
    assert [line.split(":")[0] for line in short[:6]] == ["WARNING", "  do"] * 3
    assert short[6].startswith("ANSWER at baseline's saturation point, 8 connections (1,979 requests/s; ")
    assert short[-2:] == ["6 more warnings in the full text, beside what they concern",
                          "the full text: vmharness report run --full"]
    assert len(short) <= 25  # about a screen
    full = report.text(a)
    assert all(f"WARNING: {n}" in full and f"WARNING: {n}" not in short for n in s["notes"])
    # an open-loop point's warning stands beside the load's table, below it
    assert full.index("WARNING: pti at 50% of the peak") > full.index("LATENCY AGAINST LOAD")


def test_a_rate_or_a_latency_interval_is_never_below_zero_nor_given_from_too_few_iterations(tmp_path: Path) -> None:
    assert math.isinf(intervals.log_interval([1000.0, 3000.0]).low)  # two: the t factor alone is 12.7
    wide = intervals.log_interval([100.0, 3000.0, 50.0])
    assert 0 < wide.low < 50 and wide.high > 3000
    a = _analysed("demo", tmp_path)
    assert all(r["ci_low"] is None and r["ci_high"] is None for r in report.rows_of(a))  # two boots each
    text = report.text(a)
    assert "too few iterations" in text and "-8,424" not in text and "596,796,247,996,289" not in text


def test_the_reports_text_and_json_import_no_plotting_library(tmp_path: Path) -> None:
    run = _demo(tmp_path)
    probe = ("import sys\nfrom vmharness.cli import main\n"
             "for form in (['--json'], [], ['--full'], ['--format', 'markdown'], ['--format', 'latex']):\n"
             "    assert main.main(['report', sys.argv[1], *form]) == 0\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n")
    done = subprocess.run([sys.executable, "-c", probe, str(run)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert done.stdout.rstrip().split("\n")[-1] == "[]", done.stderr


def test_warnings_under_every_figure_and_without_an_answer_all_stand_first() -> None:
    flags = ["host: r2 ran on another machine", "records.jsonl: 2 records left out", "errors: a at 8", "no KVM: TCG"]
    under = {flags[0]: "host", flags[1]: "records"}
    top, rest = summary.ranked(flags, under)
    assert [w["text"] for w in top] == [flags[0], flags[1], flags[3]] and rest == [flags[2]]
    assert top[0]["do"] == summary.UNDER["host"] and top[1]["do"] == summary.UNDER["records"]
    top, rest = summary.ranked(flags, under, answered=False)
    assert [w["text"] for w in top] == flags and rest == [] and top[2]["do"] == summary.NO_ANSWER


def test_a_client_that_may_bound_the_peak_ranks_and_a_consoles_words_do_not() -> None:
    bound = ("client local: the baseline's peak on it, 1,000 req/s, is 91% of its capacity (wrk against nginx on "
             "itself: 1,100 req/s): the peak may be the client's, not the server's (seed 003)")
    console = "a iteration 0 measured nothing: the guest did not boot; its console ends with:\nno KVM: not saturated:"
    top, rest = summary.ranked([bound, console, "rd2: no KVM: the guest ran under TCG"], {})
    assert [w["text"] for w in top] == [bound, "rd2: no KVM: the guest ran under TCG"] and rest == [console]
    assert top[0]["do"] == summary.CLIENT
