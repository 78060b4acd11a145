"""A study's host switch that changes nothing the host reports is dropped at its first host boot
(experiment/hostboots/unchanged.py), its host boot is booted no more (engine.Engine.skip), and the
answer says why it is left out (analysis/studies.py). Known answers and their negative controls: the
same verdicts and log lines drop it; any difference, an unread log, a later round, or no visit of the
reference before it keeps it measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hostboot_kit import BootingHost
from tests.unit.test_hostboot_engine import TOML, World
from tests.unit.test_studies import _both_sides
from vmharness.analysis import report, saturation
from vmharness.experiment import hostrun, runfolder, runner
from vmharness.experiment.hostboots import plan, unchanged
from vmharness.experiment.hostboots.plan import START, Stop
from vmharness.host.inspect import kernel_log
from vmharness.model import config, sections
from vmharness.system.root import HostRoot

VULNS = {"spectre_v2": "Mitigation: Retpolines", "spec_store_bypass": "Not affected"}
LOG = ["Spectre V2 : Mitigation: Retpolines", "Speculative Store Bypass: Not affected"]
NO_SSBD = Stop(0, "host-no-spec_store_bypass_disable", ("host-no-spec_store_bypass_disable",))


def _cfg() -> sections.RunConfig:
    cfg = config.run_from_json({"instance": [{"name": "on"}], "sweep": {"iterations": 2},
                                "study": {"host_switches": ["spectre_v2", "spec_store_bypass_disable"]}})
    assert isinstance(cfg, sections.RunConfig)
    return cfg


def _visit(boot: str = START, **more: Any) -> dict[str, Any]:
    return {"round": 0, "boot": boot, "instances": ["on"], "dropped": False, "vulnerabilities": dict(VULNS),
            "mitigation_log": list(LOG), **more}


def test_a_host_boot_that_reports_what_the_references_did_drops_its_switch() -> None:
    why = unchanged.why(_cfg(), [_visit()], NO_SSBD, _visit(NO_SSBD.boot))
    assert why == ("the host reports the same vulnerabilities and boot-log mitigation lines as in the boot the run "
                   "started in: spec_store_bypass_disable changes nothing on this host")


@pytest.mark.parametrize(("visits", "stop", "now"), [
    ([_visit()], NO_SSBD, _visit(NO_SSBD.boot, vulnerabilities={**VULNS, "spec_store_bypass": "Vulnerable"})),
    ([_visit()], NO_SSBD, _visit(NO_SSBD.boot, mitigation_log=[*LOG, "Speculative Store Bypass: Vulnerable"])),
    ([_visit()], NO_SSBD, _visit(NO_SSBD.boot, mitigation_log=None)),  # the log could not be read
    ([_visit(mitigation_log=None)], NO_SSBD, _visit(NO_SSBD.boot, mitigation_log=None)),
    ([_visit(vulnerabilities={})], NO_SSBD, _visit(NO_SSBD.boot, vulnerabilities={})),  # nothing reported
    ([], NO_SSBD, _visit(NO_SSBD.boot)),  # no visit of the reference's host boot before it
    ([_visit()], Stop(1, NO_SSBD.boot, NO_SSBD.instances), _visit(NO_SSBD.boot)),  # not its first round
    ([_visit()], Stop(0, START, ("on",)), _visit()),  # the reference's own host boot
    ([_visit()], Stop(0, "elsewhere", ("x",)), _visit("elsewhere")),  # no host switch's host boot
], ids=["verdict", "log-line", "log-unread", "both-unread", "no-verdicts", "no-reference", "round-2", "reference",
        "not-a-switch"])
def test_any_difference_or_anything_unknown_keeps_it_measured(visits: list[dict[str, Any]], stop: Stop,
                                                               now: dict[str, Any]) -> None:
    assert unchanged.why(_cfg(), visits, stop, now) is None


def test_the_kernel_logs_lines_are_those_of_the_guests_filter_without_stamps_or_the_command_line() -> None:
    lines = ["[    0.000000] Command line: BOOT_IMAGE=/vmlinuz mitigations=off", "[    0.1] Spectre V2 : Vulnerable",
             "[    0.2] e1000e: Intel(R) PRO/1000", "[    0.3] Kernel/User page tables isolation: enabled"]
    assert kernel_log.mitigation_lines(lines) == ["Spectre V2 : Vulnerable",
                                                  "Kernel/User page tables isolation: enabled"]


def test_a_dropped_stop_is_not_booted_again(tmp_path: Path) -> None:
    """v2off's instance dropped at its first host boot: its second round is passed over, and the run goes
    from the first round's v2off straight to the second round's own boot, then is home already."""
    (tmp_path / "skip").mkdir()
    (tmp_path / "keep").mkdir()
    world = World(tmp_path / "skip", toml=TOML)
    world.skip = lambda stop: stop.boot == "v2off" and stop.round > 0
    world.run()
    assert [(m[0], m[1]) for m in world.measured] == [(0, ""), (0, "v2off"), (1, "")]
    assert world.host.boots == 1 + 2
    control = World(tmp_path / "keep", toml=TOML)  # the negative control: nothing dropped, every stop booted
    control.run()
    assert [(m[0], m[1]) for m in control.measured] == [(0, ""), (0, "v2off"), (1, "v2off"), (1, "")]
    assert control.host.boots == 1 + 3


def test_the_answer_says_a_dropped_host_switch_is_left_out_and_why(tmp_path: Path) -> None:
    a = saturation.analyse(_both_sides(tmp_path, host_dropped=True))
    assert not [f for f, where in a.under.items() if where == "records"], a.under  # no record refused
    assert a.study is not None and "host:spectre_v2" not in a.study.switches
    assert a.study.left_out["host:spectre_v2"] == ("dropped before it was measured: its host boot reported the "
                                                   "same mitigations")
    assert "host:spectre_v2: left out: dropped before it was measured" in report.text(a)


def test_a_host_switch_dropped_after_it_was_measured_is_refused_as_a_contradiction(tmp_path: Path) -> None:
    """A forged or damaged record: the switch's instance measured in every round, then said dropped in
    the first. The reader refuses the record and says so; the switch stays in the answer."""
    run = _both_sides(tmp_path)
    run.append({"kind": "dropped", "instance": "host-no-spectre_v2", "iteration": 0, "reason": "forged"})
    a = saturation.analyse(run)
    assert any("was measured in iteration" in f and "after it was dropped" in f for f in a.under), a.under
    assert a.study is not None and "host:spectre_v2" in a.study.switches and not a.study.left_out


def test_the_hosts_log_is_read_on_the_live_host_alone_and_none_where_dmesg_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = HostRoot("/")
    assert isinstance(kernel_log.host_mitigation_lines(live), list)  # this machine's own dmesg, really run
    (tmp_path / "snap/proc").mkdir(parents=True)
    (tmp_path / "snap/sys").mkdir()
    assert kernel_log.host_mitigation_lines(HostRoot(tmp_path / "snap")) is None  # a snapshot: never "the same"
    monkeypatch.setenv("PATH", str(tmp_path))  # no dmesg to run
    assert kernel_log.host_mitigation_lines(live) is None


def test_the_run_drops_it_in_its_host_boot_once_without_booting_a_guest(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """hostrun's measure of each stop on a fake host (tests/hostboot_kit.py: spectre_v2's verdict follows
    its command line; its kernel log given here): the reference's visit, then the unchanged switch's host
    boot dropped with no runner started, said once even where the stop is measured again after a kill; the
    switch that changes the verdict goes to the runner."""
    (tmp_path / "c.toml").write_text('[guest]\naccel = "tcg"\n[sweep]\niterations = 1\n[[instance]]\nname = "on"\n'
                                     '[study]\nhost_switches = ["spectre_v2", "spec_store_bypass_disable"]\n')
    cfg = config.load_run(tmp_path / "c.toml")
    (tmp_path / "host").mkdir()
    host = BootingHost(tmp_path / "host")
    run = runfolder.new_run(cfg, tmp_path / "run", {})
    monkeypatch.setattr(kernel_log, "host_mitigation_lines", lambda _root: ["Spectre V2 : Mitigation: Retpolines"])
    started: list[str] = []  # the host boot a runner was started in
    boot = [""]

    class Runner:  # the guests' boots are not what is tested here
        def __init__(self, *_: Any, keep: Any) -> None:
            started.append(boot[0])

        def execute(self, keep_host: bool) -> dict[str, int]:
            return {"ok": 1, "failed": 0}

    monkeypatch.setattr(runner, "Runner", Runner)
    tally = {"ok": 0, "failed": 0}
    measure = hostrun.measure_with(cfg, run, host.root, lambda _: None, tally)
    ref, v2, ssbd = plan.stops(cfg)
    for stop in (ref, ssbd, ssbd):  # ssbd's twice: killed after it was dropped, then resumed in the same boot
        host.boot(host.release, host.cmdline + ("" if stop is ref else " spec_store_bypass_disable=off"))
        boot[0] = stop.boot
        measure(stop)
    assert started == [ref.boot]
    drops = [(r["instance"], r["iteration"]) for r in run.records() if r["kind"] == "dropped"]
    assert drops == [("host-no-spec_store_bypass_disable", 0)]
    assert [(v["boot"], v["dropped"]) for v in run.manifest["host_boots"]] == [
        ("", False), (ssbd.boot, True), (ssbd.boot, True)]
    host.boot(host.release, host.cmdline + " spectre_v2=off")  # the verdict differs: measured
    boot[0] = v2.boot
    measure(v2)
    assert started == [ref.boot, v2.boot] and tally["ok"] == 2
    assert hostrun.dropped_stop(run)(ssbd) and not hostrun.dropped_stop(run)(v2)
