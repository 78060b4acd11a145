"""Why each switch of a study costs what it does (analysis/switch_why.py), on a study of known answer:
pti makes each system call dearer (the reference makes the same calls as no-pti, with more vCPU time per
request, and its profile's kernel entry grew), so it is explained as the cost it is; mds costs nothing
(Holm does not name it), so nothing is said of it: the negative control. A switch that costs but whose
reference profile grew nothing against it says so rather than naming a function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit import profile_fixtures as fx
from tests.unit.test_syscalls import _counted
from vmharness.analysis import attribution as attr
from vmharness.analysis import profiles, studies, switch_why

RPS = {"on": 700.0, "no-pti": 1000.0, "no-mds": 702.0, "all-off": 1005.0}
LUCK = (1.0, 1.02, 0.98, 1.01)  # per boot, shared by every variant


def _study() -> studies.View:
    table = {v: {b: RPS[name] * luck * (1 + 0.002 * ((b + i) % 3)) for b, luck in enumerate(LUCK)}
             for i, (v, name) in enumerate(((attr.ALL_ON, "on"), (attr.leave_one_out("pti"), "no-pti"),
                                            (attr.leave_one_out("mds"), "no-mds"), (attr.ALL_OFF, "all-off")))}
    thr = attr.study("throughput", table, ["pti", "mds"])
    assert [m.holm_rejects for m in thr.marginals] == [True, False]
    return studies.View(("pti", "mds"), {}, (thr,), [])


def _records(run: Path, on_enter: float) -> tuple[list[dict[str, Any]], profiles.View]:
    records = [_counted(name, it, RPS[name] * luck, 7.0 + 0.01 * it) for name in ("on", "no-pti", "no-mds")
               for it, luck in enumerate(LUCK)]
    prof = [fx.write(run, "on", fx.scaled(fx.BASE, 1.0, enter=on_enter), 7000, 700.0),
            fx.write(run, "no-pti", dict(fx.BASE), 10000, 1000.0),
            fx.write(run, "no-mds", fx.scaled(fx.BASE, 1.0, enter=on_enter), 7000, 702.0)]
    view = profiles.view(prof, "on", run)
    assert view is not None
    return records, view


WORK = {"on": 400.0, "no-pti": 280.0, "no-mds": 398.0, "all-off": 279.0}


def test_the_switch_that_costs_is_explained_against_its_leave_one_out_and_the_one_that_does_not_is_not(
        tmp_path: Path) -> None:
    records, view = _records(tmp_path, on_enter=3.0)
    found = switch_why.explain(_study(), records, tmp_path / "records.jsonl", dict(WORK), view, "on")
    assert [w.switch for w in found] == ["pti"]  # mds, not named by Holm, is not explained
    pti = found[0]
    assert pti.against == "no-pti" and pti.reason is not None
    assert pti.reason.verdict == "each call costs more, which explains the cost"
    assert pti.reason.reading.startswith("the same system calls per request (")
    assert "+43% (400 against 280 µs) predicts -30% of the measured -30%" in pti.reason.reading
    assert pti.grew is not None and pti.grew[0].function == "syscall_enter_from_user_mode_[k]"
    said = switch_why.lines(found)
    assert said[0].startswith("why each switch costs what it does (on against the switch turned off")
    assert said[1].startswith("  pti (on against no-pti): the same system calls per request (")
    assert "; grew most per request: syscall_enter_from_user_mode (kernel) +" in said[1]
    assert switch_why.said(pti) == ("each call costs more, which explains the cost; its time grew "
                                    "most in syscall_enter_from_user_mode (kernel)")
    js = switch_why.to_json(found)
    assert set(js) == {"pti"} and js["pti"]["against"] == "no-pti"
    assert js["pti"]["growers"][0]["function"] == "syscall_enter_from_user_mode"


def test_a_cost_whose_profile_grew_nothing_says_so_and_nothing_without_readings_is_guessed(tmp_path: Path) -> None:
    records, view = _records(tmp_path, on_enter=1.0)
    found = switch_why.explain(_study(), records, tmp_path / "records.jsonl", dict(WORK), view, "on")
    assert found[0].grew == () and "; nothing grew in its profile" in switch_why.lines(found)[1]
    assert switch_why.said(found[0]) == "each call costs more, which explains the cost"
    # without counted points or profiles, or without a study, nothing is said
    assert switch_why.explain(_study(), [], tmp_path / "records.jsonl", dict(WORK), None, "on") == ()
    assert switch_why.explain(None, records, tmp_path / "records.jsonl", dict(WORK), view, "on") == ()
    assert switch_why.lines(()) == []
