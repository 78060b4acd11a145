"""The QEMU as a study's switch ([study] switches = [..., "qemu"], qemu_off = the stock QEMU): its
variants run study.qemu_off with the reference's cmdline, the switch is refused without a QEMU to turn
to, it is never dropped because its guest reports the same mitigations (what a QEMU changes, the guest
need not see), and the report attributes it like a kernel switch, labelled as the hypervisor's, with
the QEMU on each side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_studies import NOISE, _facts
from vmharness.analysis import report, saturation
from vmharness.errors import HarnessError
from vmharness.experiment import cpucheck, runner
from vmharness.experiment.boots import Session
from vmharness.model import config, sections
from vmharness.model import switches as sw
from vmharness.rundir.store import RunDir

PATCHED = "/opt/qemu-patched/bin/qemu-system-x86_64"
STOCK = "/usr/bin/qemu-system-x86_64"


def _cfg(study: dict[str, Any], qemu: str = PATCHED, guest: dict[str, Any] | None = None) -> sections.RunConfig:
    """The study's reference `on` names `qemu` ("": none), [guest] holds `guest`."""
    inst = {"name": "on", "cmdline": "pti=on", **({"qemu": qemu} if qemu else {})}
    cfg = config.run_from_json({"instance": [inst], "study": study, "guest": guest or {}})
    assert isinstance(cfg, sections.RunConfig)
    return cfg


def test_the_qemu_switchs_variants_run_the_stock_qemu_with_the_references_cmdline() -> None:
    cfg = _cfg({"switches": ["pti", "qemu"], "qemu_off": STOCK, "one_on": True})
    got = {i.name: (i.cmdline, i.qemu) for i in cfg.instance}
    assert got == {"on": ("pti=on", PATCHED), "no-pti": ("pti=off", PATCHED), "no-qemu": ("pti=on", STOCK),
                   "all-off": ("pti=off", STOCK), "only-pti": ("pti=on", STOCK), "only-qemu": ("pti=off", PATCHED)}
    assert config.run_from_json(cfg.to_json()) == cfg  # a resumed run's configuration holds them already
    assert cpucheck.named_qemus(cfg) == {STOCK: "config.study.qemu_off", PATCHED: "config.instance[0].qemu"}
    # [guest]'s QEMU is the reference's when the instance names none
    cfg = _cfg({"switches": ["qemu"], "qemu_off": STOCK}, qemu="", guest={"qemu": PATCHED})
    assert [(i.name, i.qemu or cfg.guest.qemu) for i in cfg.instance] == [("on", PATCHED), ("no-qemu", STOCK)]


@pytest.mark.parametrize(("study", "qemu", "needle"), [
    ({"switches": ["qemu"]}, PATCHED, "study.switches: qemu needs study.qemu_off"),
    ({"switches": ["qemu"], "qemu_off": PATCHED}, PATCHED, "the reference on runs that QEMU already"),
    ({"switches": ["qemu"], "qemu_off": STOCK}, STOCK, "the reference on runs that QEMU already"),
    ({"switches": ["pti"], "qemu_off": STOCK}, PATCHED, "study.qemu_off is set, but study.switches has no qemu"),
    ({"qemu_off": STOCK}, PATCHED, "study.qemu_off is set, but study.switches has no qemu"),
    ({"switches": ["qemu"], "qemu_off": "qemu-system-x86_64"}, PATCHED, "study.qemu_off 'qemu-system-x86_64' is not"),
    ({"switches": ["qemu", "all"], "qemu_off": STOCK}, PATCHED, "'all' is every switch, and it is not alone"),
])
def test_a_qemu_switch_that_cannot_be_made_is_refused(study: dict[str, Any], qemu: str, needle: str) -> None:
    with pytest.raises(HarnessError, match=needle):
        _cfg(study, qemu)


class _Run:
    def __init__(self, manifest: dict[str, Any]) -> None:
        self.manifest = manifest


class _Booted:
    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts


def test_the_qemu_switch_is_never_dropped_for_what_its_guest_reports() -> None:
    cfg = _cfg({"switches": ["pti", "qemu"], "qemu_off": STOCK})
    same = _facts("pti=on", log=("pti: enabled",))
    r = runner.Runner.__new__(runner.Runner)
    r.cfg, r.run = cfg, _Run({"instances": {"on": same}})  # type: ignore[assignment]
    for name, dropped in (("no-qemu", False), ("no-pti", True)):  # no-pti: its switch changed nothing here
        s = Session(0, name, ())
        assert (r._changes_nothing(s, _Booted(same)) is not None) == dropped, name  # type: ignore[arg-type]


RPS = {"on": 1000.0, "no-pti": 1250.0, "no-qemu": 800.0, "all-off": 1000.0}  # the stock QEMU is faster by 25%


def _analysed(tmp_path: Path) -> saturation.Analysis:
    cfg = _cfg({"switches": ["pti", "qemu"], "qemu_off": STOCK})
    same = _facts("pti=on", log=("pti: enabled",))
    facts = {"on": same, "no-qemu": same, "no-pti": _facts("pti=off"), "all-off": _facts("pti=off")}
    qemus = {n: {"path": p, "real": p, "version": v, "build": "", "sha256": h * 64}
             for n, p, v, h in (("on", PATCHED, "10.0.2", "a"), ("no-pti", PATCHED, "10.0.2", "a"),
                                ("no-qemu", STOCK, "7.2.22", "b"), ("all-off", STOCK, "7.2.22", "b"))}
    run = RunDir.create(tmp_path / "run", {"config": cfg.to_json(), "instances": facts, "qemu": qemus,
                                           "machines": {"server": {"machine": "srv"}, "clients": []}})
    return measured(run, RPS)


def measured(run: RunDir, rates: dict[str, float]) -> saturation.Analysis:
    """`run` with each instance measured at 16 connections in every boot of NOISE, at its rate, analysed."""
    for it, luck in enumerate(NOISE):
        for name, rps in rates.items():
            value, p50 = rps * luck, 1e6 / (rps * luck)
            run.append({"kind": "measurement", "key": f"{name}/16/{it}", "ok": True, "instance": name,
                        "connections": 16, "iteration": it,
                        "client": {"requests_per_s": value, "requests": 1000, "errors": {"total": 0},
                                   "latency_us": {"percentiles": {"50": p50, "90": p50, "99": 2 * p50,
                                                                  "99.9": 3 * p50}}}})
    return saturation.analyse(run)


def test_the_qemu_switch_is_attributed_like_the_others_and_labelled_the_hypervisors(tmp_path: Path) -> None:
    a = _analysed(tmp_path)
    assert a.study is not None and a.study.switches == ("pti", "qemu") and not a.study.left_out
    _, qemu = a.study.studies[0].marginals
    assert math.isclose(qemu.change.change, 1000 / 800 - 1) and qemu.holm_rejects  # the patched QEMU's gain
    text = report.text(a)
    assert ("  qemu is the hypervisor's switch: on, QEMU 10.0.2 (/opt/qemu-patched/bin/qemu-system-x86_64, sha256 "
            "aaaaaaaaaaaa); off, QEMU 7.2.22 (/usr/bin/qemu-system-x86_64, sha256 bbbbbbbbbbbb)") in text
    js = report.to_json(a)["attribution"]
    assert js["sides"] == {"pti": "guest kernel", "qemu": "hypervisor"} and "QEMU 7.2.22" in js["hypervisor"]["qemu"]


def test_the_reference_check_passes_over_the_qemu_switch_and_still_reads_the_kernels() -> None:
    """The QEMU switch has no word in the cmdline: the reference's check reads the kernel's switches
    beside it (a KeyError here once), and still refuses a reference that turns one of those off."""
    sw.check_reference("on", "pti=on", ["pti", sw.QEMU])
    with pytest.raises(HarnessError, match="already turns pti off"):
        sw.check_reference("on", "pti=off", ["pti", sw.QEMU])
