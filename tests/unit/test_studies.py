"""An attribution study's answer from a run folder of known content (analysis/studies.py): each switch's
marginal cost at the baseline's peak, the total and interaction, the waterfall's steps, and the switches
left out with their reason, in the text, the Markdown and the JSON."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vmharness.analysis import markdown, report, saturation
from vmharness.model import config
from vmharness.rundir.store import RunDir

SWITCHES = ["pti", "spectre_v2", "spectre_v1", "mds"]
# throughput at the peak; pti costs 1 - 1000/1250 = 20%, spectre_v2 nothing; all off is 1300: the two
# marginal costs explain log(1250/1000) of log(1300/1000), the interaction the rest
RPS = {"on": 1000.0, "no-pti": 1250.0, "no-spectre_v2": 1000.0, "no-spectre_v1": 1000.0, "all-off": 1300.0}
NOISE = (1.0, 1.01, 0.99, 1.02, 0.98)  # per boot, shared by every variant of a block (a boot's luck)


def _facts(cmdline: str, spectre: str = "Mitigation: Retpolines", log: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"kernel": "6.1", "cmdline": cmdline, "cpu_flags": ["fpu"], "vulnerabilities": {"spectre_v2": spectre},
            "mitigation_log": list(log)}


def _run(tmp_path: Path) -> RunDir:
    cfg = config.run_from_json({"instance": [{"name": "on", "cmdline": "pti=on"}],
                                "study": {"switches": SWITCHES}, "sweep": {"connections": "8,16"}})
    facts = {"on": _facts("pti=on", log=("pti: enabled",)), "no-pti": _facts("pti=off"),
             "no-spectre_v2": _facts("pti=on spectre_v2=off", "Vulnerable", ("pti: enabled",)),
             "no-spectre_v1": _facts("pti=on nospectre_v1", log=("pti: enabled",)),  # reports the same
             "all-off": _facts("x", "Vulnerable")}
    run = RunDir.create(tmp_path / "run", {"config": cfg.to_json(), "instances": facts,
                                           "machines": {"server": {"machine": "srv"}, "clients": []}})
    run.append({"kind": "dropped", "instance": "no-mds", "iteration": 0, "reason": "the same"})
    for it, luck in enumerate(NOISE):
        for name, rps in RPS.items():
            for conns in (8, 16) if name == "on" else (16,):
                value = rps * luck * (0.5 if conns == 8 else 1.0)
                p50 = 1e6 / value
                run.append({"kind": "measurement", "key": f"{name}/{conns}/{it}", "ok": True, "instance": name,
                            "connections": conns, "iteration": it,
                            "client": {"requests_per_s": value, "requests": 1000, "errors": {"total": 0},
                                       "latency_us": {"percentiles": {"50": p50, "90": p50, "99": 2 * p50,
                                                                      "99.9": 3 * p50}}}})
    return run


def test_each_switch_costs_what_was_put_in_and_the_rest_is_the_interaction(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path))
    assert a.peak == 16 and a.study is not None
    assert a.study.switches == ("pti", "spectre_v2")
    assert a.study.left_out == {
        "spectre_v1": "measured, but its guest reported the same mitigations as the reference's",
        "mds": "dropped before it was measured: its guest reported the same mitigations"}
    thr = a.study.studies[0]
    pti, v2 = thr.marginals
    assert math.isclose(pti.change.change, 1000 / 1250 - 1) and pti.holm_rejects
    assert math.isclose(v2.change.change, 0.0, abs_tol=1e-12) and not v2.holm_rejects  # the negative control
    assert thr.total is not None and math.isclose(thr.total.change, 1000 / 1300 - 1)
    assert thr.interaction is not None and math.isclose(thr.interaction.change, 1250 / 1300 - 1)
    assert "over 2 switches" in thr.method  # the family is the switches compared, not the four asked
    p50 = a.study.studies[1]
    assert math.isclose(p50.marginals[0].change.change, 1250 / 1000 - 1)  # latency rises by what rps fell
    steps = a.study.waterfall
    assert [s[0] for s in steps] == ["pti", "spectre_v2", "interaction"]
    assert math.isclose(steps[0][1], 1300 * math.prod(NOISE) ** 0.2) and math.isclose(steps[-1][2], 1000 *
                                                                                     math.prod(NOISE) ** 0.2)


def test_the_study_is_in_every_form_of_the_report(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path))
    text = report.text(a)
    assert "attribution at 16 connections (Bonferroni-adjusted 95% intervals over 2 switches" in text
    assert "  throughput: pti: costs 20.0% (" in text and "a change by Holm" in text
    assert "  throughput: spectre_v2: " in text and "not told from none by Holm" in text
    assert text.startswith("ANSWER at on's saturation point, 16 connections (1,000 requests/s; 1 warning): the cost "
                           "of each against on; a switch: all on against it off (97.5% intervals, Holm over 2); ")
    # each switch's row names its side
    assert "\n  pti (guest)         -20.0% [-20.0%, -20.0%]  +25.0% [+25.0%, +25.0%]  a change by Holm\n" in text
    assert "  mds: left out: dropped before it was measured" in text
    assert "spectre_v1: left out: measured, but its guest reported the same" in text
    assert not any("may have done nothing" in f for f in a.flags)  # said once, in the study's answer
    js = report.to_json(a)["attribution"]
    assert js["switches"] == ["pti", "spectre_v2"] and set(js["left_out"]) == {"mds", "spectre_v1"}
    assert math.isclose(js["by_metric"]["throughput"]["marginals"][0]["change"]["change"], -0.2)
    assert [s["step"] for s in js["waterfall"]] == ["pti", "spectre_v2", "interaction"]
    assert "- throughput: pti: costs 20.0%" in markdown.render(a)


def test_a_run_without_a_study_or_with_another_baseline_has_none(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert saturation.analyse(run, baseline="all-off").study is None
    assert report.to_json(saturation.analyse(run, baseline="all-off"))["attribution"] is None


def test_the_waterfall_is_drawn_beside_the_other_figures_and_embedded(tmp_path: Path) -> None:
    from vmharness.analysis import publish

    a = saturation.analyse(_run(tmp_path))
    written = publish.publish(a, tmp_path / "report", "study")
    names = {p.name for p in written}
    assert {"attribution.png", "attribution.svg"} <= names
    html = (tmp_path / "report/report.html").read_text()
    assert "From all mitigations off to all on, at 16 connections" in html


def test_a_switch_that_changes_nothing_leaves_all_off_to_the_leave_one_out_of_the_other(tmp_path: Path) -> None:
    """pti and mds studied, mds dropped at its boot: all-off (pti and mds off) is then no-pti in all but
    a switch that changes nothing, and is dropped with it (experiment/runner.py); no-pti stands for it,
    so the total is pti's own cost and nothing is left to interact."""
    cfg = config.run_from_json({"instance": [{"name": "on", "cmdline": "pti=on"}],
                                "study": {"switches": ["pti", "mds"]}})
    facts = {"on": _facts("pti=on", log=("pti: enabled",)), "no-pti": _facts("pti=off")}
    run = RunDir.create(tmp_path / "run", {"config": cfg.to_json(), "instances": facts,
                                           "machines": {"server": {"machine": "srv"}, "clients": []}})
    run.append({"kind": "dropped", "instance": "no-mds", "iteration": 0, "reason": "the same"})
    run.append({"kind": "dropped", "instance": "all-off", "iteration": 0, "reason": "no-pti stands for it"})
    for it, luck in enumerate(NOISE):
        for name, rps in (("on", 1000.0), ("no-pti", 1250.0)):
            run.append({"kind": "measurement", "key": f"{name}/16/{it}", "ok": True, "instance": name,
                        "connections": 16, "iteration": it,
                        "client": {"requests_per_s": rps * luck, "requests": 1000, "errors": {"total": 0},
                                   "latency_us": {"percentiles": {"50": 1e3, "90": 1e3, "99": 2e3, "99.9": 3e3}}}})
    a = saturation.analyse(run)
    assert a.study is not None and a.study.switches == ("pti",) and set(a.study.left_out) == {"mds"}
    thr = a.study.studies[0]
    assert math.isclose(thr.marginals[0].change.change, -0.2) and thr.marginals[0].holm_rejects
    assert thr.total is not None and math.isclose(thr.total.change, -0.2)
    assert thr.interaction is not None and math.isclose(thr.interaction.change, 0.0, abs_tol=1e-12)
    assert [s[0] for s in a.study.waterfall] == ["pti"]  # no step for an interaction that cannot be
    assert math.isclose(a.study.waterfall[0][2], 1000.0 * math.exp(sum(map(math.log, NOISE)) / len(NOISE)))


def _both_sides(tmp_path: Path, same: bool = False, host_dropped: bool = False) -> RunDir:
    """spectre_v2 studied on both sides, pti on the guest's: the guest's pti costs 20%, its spectre_v2
    nothing; the host's spectre_v2 costs 1 - 1000/1100, measured in its own host boot (or, `host_dropped`,
    dropped at it: experiment/hostboots/unchanged.py)."""
    cfg = config.run_from_json({"instance": [{"name": "on", "cmdline": "pti=on"}],
                                "study": {"switches": ["pti", "spectre_v2"], "host_switches": ["spectre_v2"]},
                                "sweep": {"connections": "8,16"}})
    rps = {"on": 1000.0, "no-pti": 1250.0, "no-spectre_v2": 1000.0, "all-off": 1250.0, "host-no-spectre_v2": 1100.0}
    facts = {"on": _facts("pti=on", log=("pti: enabled",)), "no-pti": _facts("pti=off"),
             "no-spectre_v2": _facts("pti=on spectre_v2=off", "Mitigation: Retpolines" if same else "Vulnerable",
                                     ("pti: enabled",)),
             "all-off": _facts("x", "Vulnerable"), "host-no-spectre_v2": _facts("pti=on", log=("pti: enabled",))}
    run = RunDir.create(tmp_path / "run", {"config": cfg.to_json(), "instances": facts,
                                           "machines": {"server": {"machine": "srv"}, "clients": []}})
    if host_dropped:
        del rps["host-no-spectre_v2"]
        run.append({"kind": "dropped", "instance": "host-no-spectre_v2", "iteration": 0, "reason": "the same"})
    for it, luck in enumerate(NOISE):
        for name, value in rps.items():
            for conns in (8, 16) if name == "on" else (16,):
                v = value * luck * (0.5 if conns == 8 else 1.0)
                run.append({"kind": "measurement", "key": f"{name}/{conns}/{it}", "ok": True, "instance": name,
                            "connections": conns, "iteration": it,
                            "client": {"requests_per_s": v, "requests": 1000, "errors": {"total": 0},
                                       "latency_us": {"percentiles": {"50": 1e6 / v, "90": 1e6 / v, "99": 2e6 / v,
                                                                      "99.9": 3e6 / v}}}})
    return run


def test_a_switch_on_both_sides_is_labelled_with_its_side_and_the_hosts_are_a_family_of_their_own(
        tmp_path: Path) -> None:
    a = saturation.analyse(_both_sides(tmp_path))
    assert a.study is not None
    assert a.study.switches == ("pti", "guest:spectre_v2", "host:spectre_v2")
    assert a.study.sides == {"pti": "guest", "guest:spectre_v2": "guest", "host:spectre_v2": "host"}
    assert a.study.off["host:spectre_v2"] == "host-no-spectre_v2" and a.study.off["guest:spectre_v2"] == "no-spectre_v2"
    guest, host = a.study.studies[0], a.study.host[0]
    assert [m.switch for m in guest.marginals] == ["pti", "guest:spectre_v2"]  # all-off turns the guest's off only
    assert [m.switch for m in host.marginals] == ["host:spectre_v2"] and host.total is None
    assert math.isclose(host.marginals[0].change.change, 1000 / 1100 - 1) and host.marginals[0].holm_rejects
    assert math.isclose(guest.marginals[1].change.change, 0.0, abs_tol=1e-12)  # the guest's side did nothing
    assert [s for s, *_ in a.study.waterfall] == ["pti", "guest:spectre_v2", "interaction"]
    text = report.text(a)
    assert "\n  host:spectre_v2 (host)    -9.1% [" in text and "\n  guest:spectre_v2 (guest)  +0.0% [" in text
    assert "the host's switches, each against the reference in its own host boot" in text
    js = report.to_json(a)
    assert js["attribution"]["sides"] == {"pti": "guest kernel", "guest:spectre_v2": "guest kernel",
                                          "host:spectre_v2": "host kernel"}
    rows = {r["name"]: r for r in js["summary"]["rows"]}
    assert (rows["host:spectre_v2"]["side"], rows["host:spectre_v2"]["off"]) == ("host", "host-no-spectre_v2")
    assert "host-no-spectre_v2" not in rows  # the study's own instance: said by its switch's row
    from vmharness.analysis import flame  # a label's graph is a file name of plain letters

    assert flame.switch_file("host:spectre_v2") == "switch-flame-host-spectre_v2.svg"


def test_the_guest_side_of_a_switch_on_both_sides_left_out_is_said_once_by_its_label(tmp_path: Path) -> None:
    """The guest's no-spectre_v2 reports the same mitigations as the reference: left out by its label,
    said among the study's answer and not again as a warning; the host's side stays compared."""
    a = saturation.analyse(_both_sides(tmp_path, same=True))
    assert a.study is not None and a.study.switches == ("pti", "host:spectre_v2")
    assert a.study.left_out == {"guest:spectre_v2": "measured, but its guest reported the same mitigations as "
                                                    "the reference's"}
    assert not any("no-spectre_v2" in f and "may have done nothing" in f for f in a.flags), a.flags
