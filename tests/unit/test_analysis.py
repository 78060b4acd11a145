"""The statistics and the saturation analysis, on run directories written with known numbers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vmharness.analysis import markdown, publish, report, saturation
from vmharness.errors import HarnessError
from vmharness.rundir.store import RunDir


def _record(run: RunDir, instance: str, conns: int, it: int, rps: float, p99: float, server: float,
            client: float | None = None, errors: int = 0) -> None:
    samples = {"srv": {"cpu": {"cpu": {"busy": server}}}}
    if client is not None:
        samples["cli"] = {"cpu": {"cpu": {"busy": client}}}
    run.append({"kind": "measurement", "key": f"{instance}/{conns}/{it}", "ok": True, "instance": instance,
                "connections": conns, "iteration": it,
                "client": {"requests_per_s": rps, "requests": int(rps * 10), "errors": {"total": errors},
                           "latency_us": {"percentiles": {"50": p99 / 4, "90": p99 / 2, "99": p99, "99.9": p99 * 2}}},
                "samples": samples})


def _run(tmp_path: Path, points: dict[tuple[str, int], list[tuple[float, float, float]]],
         client: float | None = None, errors: int = 0) -> RunDir:
    run = RunDir.create(tmp_path / "run", {
        "config": {"instance": [{"name": "base"}, {"name": "mitig"}], "server": {"workers": 0}},
        "machines": {"server": {"machine": "srv"}, "clients": [{"machine": "cli"}]}})
    for (inst, conns), its in points.items():
        for i, (rps, p99, busy) in enumerate(its):
            _record(run, inst, conns, i, rps, p99, busy, client, errors)
    return run


def test_peak_overhead_and_a_clean_bill(tmp_path: Path) -> None:
    run = _run(tmp_path, {
        ("base", 64): [(500.0, 100, 95), (505.0, 100, 95), (495.0, 100, 95)],
        ("base", 128): [(1000.0, 200, 99), (1010.0, 210, 99), (990.0, 190, 99)],
        ("base", 256): [(800.0, 400, 99), (810.0, 410, 99), (790.0, 390, 99)],
        ("mitig", 128): [(820.0, 260, 99), (830.0, 250, 99), (810.0, 270, 99)],
    })
    a = saturation.analyse(run)
    assert (a.baseline, a.peak, a.plausible_peaks, a.flags) == ("base", 128, [], [])
    tp = a.changes["mitig"]["throughput"]
    assert tp.change == pytest.approx(-0.18, abs=1e-3) and tp.high < 0 and tp.significant
    assert tp.method == "paired by iteration, t on log ratio, n=3"
    assert a.changes["mitig"]["p99"].change == pytest.approx(0.30, abs=2e-3)
    text = report.text(a)
    assert text.startswith("ANSWER at base's saturation point, 128 connections (1,000 requests/s; no warnings): the "
                           "cost of each against base; 95% intervals\n")  # no warning: the answer's table comes first
    assert "\n  mitig  -18.0% [" in text and "  a change\n" in text
    assert "\nbaseline base: saturation point 128 connections (95%: 128–128), 1,000 requests/s ± " in text
    assert "mitig vs base at 128 connections (paired by iteration, t on log ratio, n=3):\n  throughput -18.0% [" \
        in text
    assert report.to_csv(a).splitlines()[0].startswith("instance,connections,iterations,requests_per_s")
    data = report.to_json(a)
    assert data["peak_connections"] == 128 and data["peak"]["connections_low"] == 128
    assert data["changes_at_peak"]["mitig"]["throughput"]["method"] == tp.method
    assert "| mitig | paired by iteration, t on log ratio, n=3 | -18.0% [" in markdown.render(a)


def test_a_change_without_significance_says_what_could_have_been_seen(tmp_path: Path) -> None:
    run = _run(tmp_path, {("base", 8): [(1000.0, 100, 99), (1100.0, 110, 99), (900.0, 90, 99)],
                          ("mitig", 8): [(990.0, 100, 99), (1120.0, 110, 99), (880.0, 90, 99)]})
    a = saturation.analyse(run)
    tp = a.changes["mitig"]["throughput"]
    assert not tp.significant and tp.detectable > 0
    assert f"throughput {tp.change:+.1%} [{tp.low:+.1%}, {tp.high:+.1%}]: no change detected; this run could " \
           f"have seen ±{tp.detectable:.1%}" in report.text(a)
    assert f"(none detected; ±{tp.detectable:.1%} detectable)" in markdown.render(a)
    assert report.to_json(a)["changes_at_peak"]["mitig"]["throughput"]["significant"] is False


def test_the_issues_boots_are_paired_and_their_noise_split(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {
        "config": {"instance": [{"name": "off"}, {"name": "pti"}], "sweep": {"duration": 10, "wait": 1.0}},
        "machines": {"server": {"machine": "guest"}, "clients": [{"machine": "local"}]}})
    curve = {4: 0.7, 8: 1.0, 16: 0.9}
    for it, (off, pti) in enumerate(((884.0, 744.0), (1315.0, 969.0), (1344.0, 911.0))):
        for inst, rps in (("off", off), ("pti", pti)):
            run.append({"kind": "session", "instance": inst, "iteration": it, "ok": True, "boot_seconds": 20.0})
            for c, scale in curve.items():
                wobble = 1 + 0.01 * ((it + c) % 3 - 1) if c != 8 else 1.0
                _record(run, inst, c, it, rps * scale * wobble, 100.0, 99)
    a = saturation.analyse(run)
    assert a.peak == 8 and a.design.block == "boot" and a.design.block_seconds == 20.0
    tp = a.changes["pti"]["throughput"]
    assert tp.method == "paired by boot, t on log ratio, n=3"
    assert (round(tp.low, 2), round(tp.high, 2)) == (-0.43, -0.02)
    noise = a.noise["off"]
    assert noise.split.blocks == 3 and noise.split.counts == 3 and noise.split.share > 0.9
    assert noise.plan is not None and noise.plan.repeats == 1 and noise.plan.blocks > 300
    line = next(x for x in report.text(a).splitlines() if x.startswith("noise in off: "))
    assert "of the variance is between boots" in line and f"{noise.plan.blocks} boots × 1 measurement" in line
    assert report.to_json(a)["noise"]["off"]["plan"]["blocks"] == noise.plan.blocks


def test_warnings_come_first(tmp_path: Path) -> None:
    run = _run(tmp_path, {
        ("base", 64): [(500.0, 100, 40), (900.0, 100, 40)],
        ("base", 128): [(700.0, 100, 45), (720.0, 100, 45)],
    }, client=97.0, errors=300)
    a = saturation.analyse(run)
    joined = "\n".join(a.flags)
    assert "not saturated: the server was 45% busy" in joined
    assert ("client-bound: client cli was 97% busy at the peak (128 connections), while the server was 45% busy: "
            "this measures the client (seed 003)") in joined
    assert "peaks at the largest count (128)" in joined
    assert "the peak is not distinct: 64 connections" in joined
    assert "errors: base at 64 connections had 4.3% errors" in joined
    assert report.text(a).startswith("WARNING: not saturated")


def test_a_point_measured_once_is_a_plausible_peak_only_if_it_reaches_the_peaks_interval(tmp_path: Path) -> None:
    peak = [(1000.0 + d, 100.0, 99.0) for d in (-8.0, 0.0, 8.0)]
    run = _run(tmp_path, {("base", 16): [(600.0, 100, 99)], ("base", 32): [(990.0, 100, 99)],
                          ("base", 64): peak, ("base", 128): [(900.0, 100, 99)]})
    a = saturation.analyse(run)
    assert a.peak == 64 and a.peak_estimate is not None and 900.0 < a.peak_estimate.low < 990.0
    assert a.plausible_peaks == [32]  # 16 and 128, measured once each, fall short of the peak's interval


def test_a_flat_curve_has_no_distinct_peak(tmp_path: Path) -> None:
    run = _run(tmp_path, {("base", c): [(1000.0 + d, 100, 99) for d in (-8.0, 0.0, 8.0)] for c in (8, 16, 32, 64)})
    a = saturation.analyse(run)
    assert a.plausible_peaks == [c for c in (8, 16, 32, 64) if c != a.peak]
    assert any(f.startswith("the peak is not distinct: ") for f in a.flags)
    assert not any(f.startswith("noisy") for f in a.flags)


def test_a_noisy_peak_asks_for_iterations(tmp_path: Path) -> None:
    run = _run(tmp_path, {("base", 8): [(400.0, 100, 99), (410.0, 100, 99), (405.0, 100, 99)],
                          ("base", 16): [(700.0, 100, 99), (1300.0, 100, 99), (1000.0, 100, 99)],
                          ("base", 32): [(500.0, 100, 99), (505.0, 100, 99), (510.0, 100, 99)]})
    a = saturation.analyse(run)
    assert a.peak == 16 and a.peak_interval is not None
    half = 4.303 * 300 / math.sqrt(3) / 1000  # t(0.975, 2) * s / sqrt(n), relative to the mean
    assert a.peak_interval.relative_half == pytest.approx(half, rel=1e-3)
    assert a.peak_estimate is not None and a.peak_estimate.low < 700 and a.peak_estimate.high > 1100
    assert f"noisy: the peak's 95% interval is ±{half:.0%} of its mean over 3 iterations; add iterations" in a.flags


def test_client_bound_alone_and_errors_alone(tmp_path: Path) -> None:
    bound = saturation.analyse(_run(tmp_path / "a", {("base", 8): [(500.0, 100, 60), (505.0, 100, 60)],
                                                     ("base", 16): [(600.0, 100, 70), (602.0, 100, 70)],
                                                     ("base", 32): [(550.0, 100, 65), (552.0, 100, 65)]},
                                    client=99.0))
    assert [f.split(":")[0] for f in bound.flags] == ["not saturated", "client-bound"]
    clean: dict[tuple[str, int], list[tuple[float, float, float]]] = {
        ("base", 8): [(500.0, 100, 99), (505.0, 100, 99)], ("base", 16): [(600.0, 100, 99), (602.0, 100, 99)],
        ("base", 32): [(550.0, 100, 99), (552.0, 100, 99)]}
    assert saturation.analyse(_run(tmp_path / "b", clean, client=50.0, errors=5)).flags == []  # 0.1% errors
    erring = saturation.analyse(_run(tmp_path / "c", clean, client=50.0, errors=600))
    assert [f.split(" at ")[0] for f in erring.flags] == ["errors: base"] * 3


def test_no_measurement_is_said(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {})
    run.append({"kind": "measurement", "key": "base/8/0", "instance": "base", "connections": 8, "iteration": 0,
                "ok": False})
    a = saturation.analyse(run)
    assert a.peak is None and a.flags[0] == "no successful measurement in this run"
    assert "1 points failed" in a.flags[1]


def test_every_form_is_written(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    run = _run(tmp_path, {("base", 64): [(500.0, 100, 95), (520.0, 110, 95)],
                          ("base", 128): [(900.0, 200, 99), (950.0, 210, 99)],
                          ("mitig", 128): [(800.0, 260, 99), (810.0, 250, 99)]})
    out = tmp_path / "out"
    written = publish.publish(saturation.analyse(run), out, title="t <&> run")
    assert {p.name for p in written} == {"report.txt", "report.md", "report.csv", "report.json", "report.tex",
                                         "throughput.png", "throughput.svg", "throughput.pdf", "latency.png",
                                         "latency.svg", "latency.pdf", "forest.png", "forest.svg", "forest.pdf",
                                         "report.html"}
    assert (out / "forest.pdf").read_bytes()[:5] == b"%PDF-"  # the answer's figure for the paper too
    assert (out / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "latency.pdf").read_bytes()[:5] == b"%PDF-"
    assert ET.parse(out / "latency.svg").getroot().tag.endswith("svg")
    page = (out / "report.html").read_text()
    assert "<title>t &lt;&amp;&gt; run</title>" in page and page.count("<svg") == 3
    assert "saturation point 128 connections" in page
    assert "<li>changes: paired by iteration, t on log ratio, n=2</li>" in page


def test_compare_puts_runs_side_by_side(tmp_path: Path) -> None:
    def one(name: str, rps: float, p99: float) -> RunDir:
        run = RunDir.create(tmp_path / name, {"config": {"instance": [{"name": "nginx"}]},
                                              "machines": {"server": {"machine": "srv"}, "clients": []}})
        for c, scale in ((64, 0.6), (128, 1.0), (256, 0.9)):
            for i, jitter in enumerate((-5.0, 0.0, 5.0)):
                _record(run, "nginx", c, i, rps * scale + jitter, p99 * scale, 99)
        return run

    a = saturation.compare([one("kernel-old", 1000, 200), one("kernel-new", 900, 240)])
    assert (a.baseline, a.peak) == ("kernel-old/nginx", 128)
    tp = a.changes["kernel-new/nginx"]["throughput"]
    assert tp.change == pytest.approx(-0.10, abs=1e-3)
    assert tp.method == "unpaired, Welch t on log ratio, n=3 and 3"  # two runs' iterations are not blocks
    assert a.changes["kernel-new/nginx"]["p99"].change == pytest.approx(0.20)
    assert "kernel-new/nginx vs kernel-old/nginx at 128 connections (unpaired, Welch t on log ratio, n=3 and 3):\n" \
           "  throughput -10.0% [" in report.text(a)
    with pytest.raises(HarnessError, match="two runs are both named kernel-old"):
        saturation.compare([RunDir.open(tmp_path / "kernel-old"), RunDir.open(tmp_path / "kernel-old")])


def _fixed(tmp_path: Path, at: int, variants: str = "peak", target: int | None = None) -> RunDir:
    """The baseline swept over 64, 128 and 256 connections (its highest mean at 256, by 1%, within its
    interval), mitig measured at `at` alone, as sweep.variants = "peak" does (its load_target says
    `target`, `at` unless a hand changed it)."""
    run = RunDir.create(tmp_path / f"run-{at}-{variants}-{target}", {
        "config": {"instance": [{"name": "base"}, {"name": "mitig"}], "sweep": {"variants": variants}},
        "machines": {"server": {"machine": "srv"}, "clients": [{"machine": "cli"}]}})
    for it, jitter in enumerate((0.0, 20.0, -20.0)):
        _record(run, "base", 64, it, 500.0 + jitter, 100, 99)
        if it == 0:
            run.append({"kind": "load_target", "instance": "base", "connections": target or at,
                        "requests_per_s": 1000.0, "iterations": 1, "rates": {}, "from": "the baseline's highest mean"})
        _record(run, "base", 128, it, 1000.0 + jitter, 200, 99)
        _record(run, "base", 256, it, 1010.0 - jitter, 200, 99)
        _record(run, "mitig", at, it, 800.0 + jitter, 250, 99)
    return run


def test_with_only_the_baseline_swept_the_changes_are_read_where_the_others_were_measured(tmp_path: Path) -> None:
    a = saturation.analyse(_fixed(tmp_path, 128))
    assert a.peak == 128 and a.peak_estimate is not None and a.peak_estimate.at == 256
    assert a.changes["mitig"]["throughput"].change == pytest.approx(-0.2, abs=0.01)
    assert not [f for f in a.flags if "measured at" in f or "no successful point" in f]
    # the curve's own flags speak of the baseline's peak, not of where the others were measured
    assert 256 not in a.plausible_peaks and "the throughput peaks at the largest count (256): it may still rise; " \
        "extend the sweep" in a.flags
    assert "saturation point 256 connections" in report.text(a)
    text = report.text(a)
    assert text.startswith("ANSWER at base's peak as its first boot found it, 128 connections (1,000 requests/s; ")
    assert "\n  WARNING: the throughput peaks at the largest" in text  # beside the curve's peak line
    assert "; the others were measured at 128 connections, where its first iteration peaked" in report.text(a)
    # negative control: the same records read as a full sweep have nothing of mitig at 256, and say so
    swept = saturation.analyse(_fixed(tmp_path, 128, variants="sweep"))
    assert swept.peak == 256 and swept.changes == {}
    assert "mitig has no successful point at the baseline's peak (256 connections): no change is read for it" \
        in swept.flags
    # a fixed count far off the peak (its interval does not hold it) is read there, and warned of
    off = saturation.analyse(_fixed(tmp_path, 64))
    assert off.peak == 64 and "mitig" in off.changes
    assert any(f.startswith("the others were measured at 64 connections") and "not read at its saturation point"
               in f for f in off.flags)


def test_a_load_target_changed_by_hand_is_said_and_changes_no_answer_silently(tmp_path: Path) -> None:
    """mitig was measured at 128; a load_target edited to say 64 reads the changes there: mitig has no
    point there, and the report says so instead of dropping it quietly."""
    a = saturation.analyse(_fixed(tmp_path, 128, target=64))
    assert a.peak == 64 and a.changes == {}
    assert "mitig has no successful point at the baseline's peak (64 connections): no change is read for it" in a.flags
    assert "\nWARNING: mitig has no successful point at the baseline's peak (64 connections)" in report.text(a)
