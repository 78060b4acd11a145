"""What each variant ran against the baseline, and the positive control's check: on manifests and
changes with known content."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from vmharness.analysis import cells, markdown, page, report, saturation, variants
from vmharness.errors import HarnessError
from vmharness.model import config
from vmharness.rundir.store import RunDir
from vmharness.stats import Change


def _facts(cmdline: str, flags: tuple[str, ...] = ("fpu",), log: tuple[str, ...] = (),
           spectre: str = "Vulnerable") -> dict[str, Any]:
    return {"kernel": "6.1.0-28-amd64", "version": "Linux version 6.1.0-28-amd64", "microcode": "0x1",
            "cmdline": cmdline, "cpu_flags": list(flags), "vulnerabilities": {"spectre_v2": spectre},
            "mitigation_log": list(log)}


def _manifest(facts: dict[str, dict[str, Any]], control: dict[str, Any] | None = None) -> dict[str, Any]:
    instances = [{"name": n, "cmdline": f["cmdline"], "vcpu_cap": 80 if n == "control" else 0}
                 for n, f in facts.items()]
    return {"config": {"instance": instances, **({"control": control} if control else {})}, "instances": facts}


def test_pti_forced_shows_in_flags_and_boot_log_not_in_vulnerabilities() -> None:
    m = _manifest({"base": _facts("mitigations=off"),
                   "pti": _facts("mitigations=off pti=on", ("fpu", "pti"),
                                 ("Kernel/User page tables isolation: enabled",))})
    [d] = variants.diffs(m, "base")
    assert d.asked and d.seen
    assert d.lines == ("cmdline: mitigations=off pti=on", "CPU flag + pti",
                       "boot log + Kernel/User page tables isolation: enabled")
    assert variants.diff_flags([d], "base") == []


def test_a_cmdline_the_kernel_ignored_and_a_copy_are_each_a_warning() -> None:
    m = _manifest({"base": _facts("mitigations=off"), "typo": _facts("mitigations=off pti=onn"),
                   "same": _facts("mitigations=off")})
    found = variants.diffs(m, "base")
    flags = variants.diff_flags(found, "base")
    assert len(flags) == 2
    assert flags[0].startswith("same is the same as base") and "noise" in flags[0]
    assert flags[1].startswith("typo's cmdline differs from base's, but its kernel reports the same")


def test_the_control_differs_by_its_cap_and_is_not_a_warning() -> None:
    m = _manifest({"base": _facts("mitigations=off"), "control": _facts("mitigations=off")})
    [d] = variants.diffs(m, "base")
    assert d.lines == ("vcpu_cap: 0 -> 80",) and d.seen
    assert variants.diff_flags([d], "base") == []


def _change(change: float, low: float, high: float) -> Change:
    return Change(change, low, high, 0.05, 3, 0.95, "paired by boot")


@pytest.mark.parametrize(("measured", "recovered"), [
    (_change(-0.19, -0.23, -0.15), True),
    (_change(-0.19, -0.45, +0.10), False),  # holds -20% but also no change: not detected
    (_change(-0.05, -0.09, -0.01), False),  # the cap cost less than it should: the vCPU was not what saturated
    (_change(-0.19, -0.19, math.inf), False),  # one boot: no interval, nothing checked
])
def test_the_control_is_recovered_only_when_its_interval_holds_the_expected_cost(
        measured: Change, recovered: bool) -> None:
    m = {"config": {"control": {"cap": 80, "name": "control"}}}
    c = variants.control(m, {"control": {"throughput": measured}})
    assert c is not None and c.expected == pytest.approx(-0.2) and c.recovered is recovered
    flag = variants.control_flag(c)
    assert (flag is None) is (recovered or not measured.bounded)
    if flag and measured.high > 0:
        assert flag.startswith("the positive control was not detected") and "add iterations" in flag
    elif flag:
        assert "-20.0%" in flag and "not recovered" in flag and "the cap alone (80% of a CPU)" in flag
    assert variants.control(m, {}) is None and variants.control({"config": {}}, {"control": {}}) is None


def test_the_expected_cost_is_what_the_cap_takes_of_the_vcpu_time_the_baseline_used() -> None:
    assert variants.expected_change(80, None)[0] == pytest.approx(-0.2)
    assert variants.expected_change(80, [100.0])[0] == pytest.approx(-0.2)
    assert variants.expected_change(80, [91.0])[0] == pytest.approx(80 / 91 - 1)  # waited 9% of the time
    assert variants.expected_change(80, [70.0])[0] == 0.0  # under the cap: it takes nothing
    assert variants.expected_change(50, [100.0, 40.0])[0] == pytest.approx(90 / 140 - 1)
    change, basis = variants.expected_change(80, [91.0])
    assert "91% on the host" in basis
    m = {"config": {"control": {"cap": 80, "name": "control"}}}
    c = variants.control(m, {"control": {"throughput": _change(-0.10, -0.14, -0.06)}}, [91.0])
    assert c is not None and c.recovered and c.expected == pytest.approx(change)


def test_a_control_held_below_its_cap_by_contention_is_expected_to_cost_what_it_lost() -> None:
    """The CI case: the baseline's vCPU thread ran 61% of the time (the rig's L1 beside it), 15% of it
    without load; the capped control's thread ran 42%, not 50%: the cap took (61 - 42) of the 61 - 15
    the requests used, not (61 - 50)."""
    held, basis = variants.expected_change(50, [61.0], [15.0], [42.0])
    assert held == pytest.approx((42 - 15) / (61 - 15) - 1) and "the control's ran 42%: held below" in basis
    at_cap = variants.expected_change(50, [61.0], [15.0], [48.5])  # within 2 points: the cap, as before
    assert at_cap == variants.expected_change(50, [61.0], [15.0]) and at_cap[0] == pytest.approx(35 / 46 - 1)
    assert variants.expected_change(50, [61.0], [15.0], [51.0]) == at_cap  # a reading's jitter above the cap
    assert variants.expected_change(50, [61.0, 70.0], [15.0, 15.0], [42.0])[0] == pytest.approx(
        variants.expected_change(50, [61.0, 70.0], [15.0, 15.0])[0])  # a count that does not match: the cap
    m = {"config": {"control": {"cap": 50, "name": "control"}}}
    # measured -40% [-45%, -35%]: a false alarm against the cap alone (-23.9%), recovered against what it ran
    seen = {"control": {"throughput": _change(-0.40, -0.45, -0.35)}}
    assert not variants.control(m, seen, [61.0], [15.0]).recovered  # type: ignore[union-attr]
    assert variants.control(m, seen, [61.0], [15.0], [42.0]).recovered  # type: ignore[union-attr]


def test_run_control_adds_the_capped_baseline_once(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[[instance]]\nname = "a"\ncmdline = "mitigations=off"\n[[instance]]\nname = "b"\n'
                    "[control]\ncap = 70\n")
    cfg = config.load_run(path)
    assert [(i.name, i.cmdline, i.vcpu_cap) for i in cfg.instance] == [
        ("a", "mitigations=off", 0), ("b", "", 0), ("control", "mitigations=off", 70)]
    again = config.run_from_json(cfg.to_json())  # a resumed run's configuration already holds it
    assert again == cfg
    path.write_text('[[instance]]\nname = "a"\nvcpu_cap = 50\n[control]\ncap = 70\n')
    with pytest.raises(HarnessError, match=r"control\.cap: the baseline a already caps its vCPUs"):
        config.load_run(path)
    path.write_text('[[instance]]\nname = "a"\n[[instance]]\nname = "control"\n[control]\ncap = 70\n')
    with pytest.raises(HarnessError, match=r"control\.cap: an instance is already named 'control'"):
        config.load_run(path)


def test_what_the_guest_spends_without_load_is_left_out_of_the_cap() -> None:
    """A guest that spends 10% of a CPU idle (timers, samplers) serves requests with 77% of its 87%, and
    with 40% of a 50% cap: it keeps 40/77 of its throughput, not 50/87."""
    change, basis = variants.expected_change(50, [87.0], [10.0])
    assert change == pytest.approx(40 / 77 - 1)
    assert "each less the 10.0% it ran without load" in basis
    assert variants.expected_change(50, [100.0, 40.0], [5.0, 5.0])[0] == pytest.approx(80 / 130 - 1)
    plain = variants.expected_change(50, [87.0])
    # readings that cannot be right leave the plain expectation, not a nonsense one
    for idle in ([], [10.0, 10.0], [-1.0], [50.0], [87.0], [95.0]):
        assert variants.expected_change(50, [87.0], idle) == plain, idle


def test_the_idle_readings_are_averaged_per_thread_and_damaged_ones_ignored(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {})
    for rec in ({"kind": "idle", "instance": "base", "iteration": 0, "vcpu_busy_percent": [8.0, 4.0]},
                {"kind": "idle", "instance": "base", "iteration": 1, "vcpu_busy_percent": [12.0, 6.0]},
                {"kind": "idle", "instance": "pti", "iteration": 0, "vcpu_busy_percent": [50.0, 50.0]},
                # of another shape: ignored (text or true where a figure belongs refuses the folder instead)
                {"kind": "idle", "instance": "base", "iteration": 2, "vcpu_busy_percent": [[1.0], None]},
                {"kind": "idle", "instance": "base", "iteration": 3, "vcpu_busy_percent": {"a": 1}},
                {"kind": "idle", "instance": "base", "iteration": 4, "vcpu_busy_percent": [None, 1.0]}):
        run.append(rec)
    assert cells.idle_vcpus(run, "base") == [10.0, 5.0]
    assert cells.idle_vcpus(run, "control") is None


def test_the_report_puts_the_control_and_each_variants_diff_in_every_form(tmp_path: Path) -> None:
    facts = {"base": _facts("mitigations=off"), "pti": _facts("mitigations=off pti=on", ("fpu", "pti")),
             "control": _facts("mitigations=off")}
    run = RunDir.create(tmp_path / "run", {**_manifest(facts, {"cap": 80, "name": "control"}),
                                           "machines": {"server": {"machine": "srv"}, "clients": []}})
    for it in range(3):
        for name, rps, vcpu in (("base", 1000.0, 86.0), ("pti", 760.0, 92.0), ("control", 930.0, 80.0)):
            value = rps * (1 + 0.01 * it) * ((1.0, 1.02, 0.98)[it] if name != "base" else 1.0)
            run.append({"kind": "measurement", "key": f"{name}/8/{it}", "ok": True, "instance": name,
                        "connections": 8, "iteration": it, "host": {"vcpu_busy_percent": [vcpu], "window_s": 5.0},
                        "client": {"requests_per_s": value, "requests": 1000, "errors": {"total": 0},
                                   "latency_us": {"percentiles": {"50": 1.0, "90": 2.0, "99": 3.0, "99.9": 4.0}}},
                        "samples": {"srv": {"cpu": {"cpu": {"busy": 99.0}}}}})
    a = saturation.analyse(run)
    assert a.control is not None and a.control.recovered
    text = report.text(a)
    assert ("positive control control (vCPUs capped to 80%): expected -7.0% (80% of a CPU against the "
            "baseline's vCPU threads at 86% on the host at the peak), measured -7.0% [") in text
    assert ": recovered" in text
    assert "\n  control  -7.0% [" in text and "  the positive control, expected -7.0%: recovered\n" in text
    assert "<div class=\"answer\"><p><b>ANSWER at base&#x27;s saturation point" in page.render(a, "t", [])
    assert any("looks busy (99%) but its vCPU threads ran 86% of the time on the host at the peak" in f
               for f in a.flags)
    assert "pti against base: cmdline: mitigations=off pti=on\n  CPU flag + pti" in text
    js = report.to_json(a)
    assert js["control"]["recovered"] is True and js["variants"]["pti"]["differs"][1] == "CPU flag + pti"
    assert "- CPU flag + pti" in markdown.render(a)
