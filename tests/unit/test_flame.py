"""A run folder with profiled points rendered: the text, JSON and HTML report say what grew, the report's
folder gets each variant's differential flame graph drawn by the real inferno (`make inferno` installs
it; without it this test fails, never skips), shown in the page by an <img> of a data: URI; without inferno the report
still renders and says in one line how to get it."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.unit import profile_fixtures as fx
from vmharness.analysis import flame, markdown, profiles, publish, report, saturation, summary
from vmharness.rundir.store import RunDir
from vmharness.system import owned

INFERNO = "inferno-flamegraph and inferno-diff-folded are not installed: run `make inferno`"


def _run(tmp_path: Path, capped: dict[str, float] | None = None) -> RunDir:
    """base, pti (its kernel entry three times dearer per request) and the capped control over two boots at
    8 connections, each profiled once there."""
    run = RunDir.create(tmp_path / "run", {"config": {"instance": [{"name": n} for n in ("base", "pti", "capped")],
                                                      "control": {"name": "capped", "cap": 50}}})
    rates = {"base": 1000.0, "pti": 900.0, "capped": 600.0}
    for it in range(2):
        for name, rps in rates.items():
            run.append(fx.measurement(name, 8, it, rps + 10 * it))
    stacks: dict[str, dict[str, float]] = {"base": dict(fx.BASE), "pti": fx.scaled(fx.BASE, 1.0, enter=3.0),
                                           "capped": capped or fx.scaled(fx.BASE, 1.5)}
    for name, rps in rates.items():
        run.append(fx.write(run.path, name, stacks[name], 10000, rps * 0.98))
    return RunDir.open(run.path)


def test_inferno_draws_each_variants_difference_per_request(tmp_path: Path) -> None:
    assert flame.found() is not None, INFERNO
    run = _run(tmp_path)
    v = saturation.analyse(run).profiles
    assert v is not None and v.drawable
    (tmp_path / "out").mkdir()
    files = flame.draw(v, owned.Folder(tmp_path / "out", "--out out"))
    assert [f.name for f in files] == ["flame-capped.svg", "flame-pti.svg"]
    svg = files[1].read_text()
    assert ET.fromstring(svg).tag.endswith("svg")
    assert "syscall_enter_from_user_mode" in svg and "ns per 1000 requests" in svg
    assert "pti against base" in svg
    base = v.profiles[0]
    assert f"{fx.ENTER} {round(300 * fx.PERIOD * 1000 / 10000)}\n" in flame.scaled(base)  # ns per 1000 requests
    assert fx.IDLE not in flame.scaled(base)


def test_a_run_with_profiles_renders_every_form(tmp_path: Path) -> None:
    assert flame.found() is not None, INFERNO
    a = saturation.analyse(_run(tmp_path))
    text = report.text(a)
    assert "  pti: grew most per request: syscall_enter_from_user_mode (kernel) +60.0 µs (share 3.8% -> 10.5%)" in text
    assert "  capped: nothing grew" in text
    assert "  control: no function of the guest's kernel grew per request" in text
    assert "base -2.0%, capped -2.0%, pti -2.0%" in text  # profiled at 98% of its own boot's rate
    assert text.index("what grew per request") < text.index("pti vs base at 8 connections")
    # the answer's table names where a detected cost's time grew most; a cost with nothing grown names nothing
    why = {r["name"]: r["why"] for r in summary.build(a)["rows"]}
    assert a.changes["pti"]["throughput"].significant and a.changes["capped"]["throughput"].significant
    assert why["pti"] == "its time grew most in syscall_enter_from_user_mode (kernel)", why
    assert why["capped"] is None and "\n  pti: why: its time grew most in syscall_enter_from_user_mode" in text
    got = json.loads(json.dumps(report.to_json(a)))["profiles"]
    assert got["growers"]["pti"][0]["function"] == "syscall_enter_from_user_mode" and got["growers"]["pti"][0]["kernel"]
    assert got["control"] == {"instance": "capped", "kernel_growers": []}
    assert "what grew per request" in markdown.render(a)
    out = tmp_path / "out"
    written = {p.name for p in publish.publish(a, out, "profiled")}
    assert {"flame-pti.svg", "flame-capped.svg", "report.html"} <= written
    page = (out / "report.html").read_text()
    assert '<img src="data:image/svg+xml;base64,' in page and "red where a function's time per request grew" in page
    assert "<th>p</th>" in page and "<td>syscall_enter_from_user_mode (kernel)</td>" in page
    assert page.count("<svg") == 3  # the forest, throughput and latency figures inline; the flame graphs as images
    again = {p.name for p in publish.publish(a, out, "profiled")}  # the marked folder takes a report again
    assert again == written


def test_without_inferno_the_report_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flame, "found", lambda: None)
    a = saturation.analyse(_run(tmp_path))
    assert a.profiles is not None and not a.profiles.drawable
    assert f"  {profiles.MISSING}" in report.text(a).splitlines()
    assert "`make inferno`" in profiles.MISSING
    written = {p.name for p in publish.publish(a, tmp_path / "out", "profiled")}
    assert not any(n.startswith("flame-") for n in written) and "report.html" in written
    assert "<img" not in (tmp_path / "out" / "report.html").read_text()


def test_a_control_whose_kernel_grew_is_a_warning(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, capped=fx.scaled(fx.BASE, 1.5, read=3.0)))
    warned = [f for f in a.flags if f.startswith("control: tcp_recvmsg grew per request in the guest's kernel")]
    assert len(warned) == 1 and f"WARNING: {warned[0]}" in report.text(a)
