"""The KVM modules as a study's switch ([study] switches = [..., "kvm_modules"]): the reference loads its
own modules (a patched KVM), its variants with the switch off run on the host's stock ones with the
reference's cmdline; the switch is refused for a reference without modules of its own, never dropped
because its guest reports the same mitigations (what a KVM changes, the guest need not see), never left
out of the attribution for that either, and attributed like a kernel switch, labelled the hypervisor's
with the modules on each side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_qemu_switch import _Booted, _Run, measured
from tests.unit.test_studies import _facts
from vmharness.analysis import report, saturation
from vmharness.errors import HarnessError
from vmharness.experiment import runner
from vmharness.experiment.boots import Session
from vmharness.model import config, sections
from vmharness.rundir.store import RunDir

MODULES = ["/opt/kvm-patched/kvm.ko", "/opt/kvm-patched/kvm-amd.ko"]


def _cfg(study: dict[str, Any], modules: list[str] = MODULES) -> sections.RunConfig:
    inst = {"name": "on", "cmdline": "pti=on", **({"kvm_modules": modules} if modules else {})}
    cfg = config.run_from_json({"instance": [inst], "study": study})
    assert isinstance(cfg, sections.RunConfig)
    return cfg


def test_the_kvm_modules_switchs_variants_run_the_stock_modules_with_the_references_cmdline() -> None:
    cfg = _cfg({"switches": ["pti", "kvm_modules"], "one_on": True})
    got = {i.name: (i.cmdline, i.kvm_modules) for i in cfg.instance}
    patched = tuple(MODULES)
    assert got == {"on": ("pti=on", patched), "no-pti": ("pti=off", patched), "no-kvm_modules": ("pti=on", ()),
                   "all-off": ("pti=off", ()), "only-pti": ("pti=on", ()), "only-kvm_modules": ("pti=off", patched)}
    assert config.run_from_json(cfg.to_json()) == cfg  # a resumed run's configuration holds them already


def test_a_kvm_modules_switch_without_modules_of_the_references_own_is_refused() -> None:
    with pytest.raises(HarnessError, match="kvm_modules needs the reference on to load its own KVM modules"):
        _cfg({"switches": ["kvm_modules"]}, modules=[])


def test_the_kvm_modules_switch_is_never_dropped_for_what_its_guest_reports() -> None:
    cfg = _cfg({"switches": ["pti", "kvm_modules"]})
    same = _facts("pti=on", log=("pti: enabled",))
    r = runner.Runner.__new__(runner.Runner)
    r.cfg, r.run = cfg, _Run({"instances": {"on": same}})  # type: ignore[assignment]
    for name, dropped in (("no-kvm_modules", False), ("no-pti", True)):  # no-pti: its switch changed nothing
        assert (r._changes_nothing(Session(0, name, ()), _Booted(same)) is not None) == dropped, name  # type: ignore[arg-type]


RPS = {"on": 1000.0, "no-pti": 1250.0, "no-kvm_modules": 1100.0, "all-off": 1375.0}  # the patch costs 9%


def _analysed(tmp_path: Path) -> saturation.Analysis:
    cfg = _cfg({"switches": ["pti", "kvm_modules"]})
    same = _facts("pti=on", log=("pti: enabled",))  # the stock KVM's guest reports what the patched one's does
    facts = {"on": same, "no-kvm_modules": same, "no-pti": _facts("pti=off"), "all-off": _facts("pti=off")}
    run = RunDir.create(tmp_path / "run", {"config": cfg.to_json(), "instances": facts,
                                           "machines": {"server": {"machine": "srv"}, "clients": []}})
    return measured(run, RPS)


def test_the_kvm_modules_switch_is_attributed_like_the_others_and_labelled_the_hypervisors(tmp_path: Path) -> None:
    a = _analysed(tmp_path)
    # the variant's guest reported the reference's mitigations, but its modules differ (a difference the
    # host made, which the variant check sees): compared, not left out as a switch that changed nothing
    assert a.study is not None and a.study.switches == ("pti", "kvm_modules") and not a.study.left_out
    _, kvm = a.study.studies[0].marginals
    assert math.isclose(kvm.change.change, 1000 / 1100 - 1, rel_tol=1e-6) and kvm.holm_rejects
    text = report.text(a)
    assert ("  kvm_modules is the hypervisor's switch: on, KVM modules /opt/kvm-patched/kvm.ko, "
            "/opt/kvm-patched/kvm-amd.ko; off, the host's stock KVM modules") in text
    js = report.to_json(a)["attribution"]
    assert js["sides"] == {"pti": "guest kernel", "kvm_modules": "hypervisor"}
