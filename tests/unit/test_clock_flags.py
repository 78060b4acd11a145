"""A guest whose kernel changed its clocksource while it was measured (a TSC judged unstable: under TCG on
a loaded host) is a warning naming the boot; one that kept its clock, or whose clock could not be read,
is none. The names come from the guest, so only a clocksource's name is said."""

from __future__ import annotations

from pathlib import Path

from vmharness.analysis import saturation
from vmharness.rundir.store import RunDir


def _run(tmp_path: Path, clocks: list[tuple[str | None, str | None]], riders: list[str] | None = None) -> RunDir:
    run = RunDir.create(tmp_path / "run", {"config": {"instance": [{"name": "base"}, {"name": "capped"}]},
                                           "machines": {"server": {"machine": "guest"},
                                                        "clients": [{"machine": "local"}]},
                                           "guest": {"kvm": False}})
    for it, (start, end) in enumerate(clocks):
        run.append({"kind": "session", "instance": "base", "iteration": it, "ok": True, "riders": riders or []})
        run.append({"kind": "measurement", "key": f"base/8/{it}", "ok": True, "instance": "base", "connections": 8,
                    "iteration": it, "client": {"requests_per_s": 100.0 + it, "requests": 1000, "errors": {"total": 0},
                                                "latency_us": {"percentiles": dict.fromkeys(("50", "90", "99", "99.9"),
                                                                                            50.0)}}})
        run.append({"kind": "clock", "instance": "base", "iteration": it, "at_start": start, "at_end": end})
    return run


def _clock_flags(run: RunDir) -> list[str]:
    return [f for f in saturation.analyse(run).flags if "clocksource" in f]


def test_a_clocksource_that_changed_in_a_boot_is_a_warning_naming_it(tmp_path: Path) -> None:
    run = _run(tmp_path, [("tsc", "tsc"), ("tsc", "hpet"), ("tsc", None), (None, "hpet")])
    assert _clock_flags(run) == [
        "base iteration 1: the guest's clocksource went from tsc to hpet while it was measured (its kernel judged "
        "tsc unstable, as a guest under TCG on a loaded host judges the TSC): its points after the change read the "
        "time from hpet, by a system call each where that is hpet or acpi_pm, which the vDSO cannot read"]


def test_a_kept_clock_is_no_warning(tmp_path: Path) -> None:
    assert _clock_flags(_run(tmp_path, [("tsc", "tsc"), ("kvm-clock", "kvm-clock"), ("tsc", "tsc")])) == []


def test_a_name_that_is_not_a_clocksources_is_not_said(tmp_path: Path) -> None:
    said = _clock_flags(_run(tmp_path, [("tsc", "tsc"), ("tsc", "<b>x</b>; rm -rf /"), ("tsc", "tsc")]))
    assert len(said) == 1 and "from tsc to an unreadable clock while" in said[0] and "<b>" not in said[0]


def test_the_instances_that_rode_on_the_boot_are_named_with_it_and_only_the_runs_own(tmp_path: Path) -> None:
    said = _clock_flags(_run(tmp_path, [("tsc", "tsc"), ("tsc", "acpi_pm"), ("tsc", "tsc")],
                             riders=["capped", "<script>", "elsewhere"]))
    assert len(said) == 1 and said[0].startswith("base iteration 1 (with capped, on its boot): the guest's "
                                                 "clocksource went from tsc to acpi_pm while"), said
