"""Forged records in real run folders, through the real command (tests/hostile_kit.py runs each case).

Each case takes a folder a real `run` (TCG, the demo's instances, two boots) or a real `bench` wrote
(tests/unit/golden/runs/), forges one thing, and runs `report` (or `compare`): a record that contradicts
itself, another record or the run (rundir/cross_check.py, record_check.py's types, jsontext.py's keys
given twice, analysis/profiles.py's CPU time) either ends in exit 2 with one line naming the file and the
line or key, or in exit 0 with a warning naming the fault; never in the undamaged folder's answer
without a warning. `--resume` reads the records through the same reader (store.RunDir.records): the
points such a record claims are measured again. docs/safety.md, section 12, maps these to the promises.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import hostile_kit
from tests.hostile_kit import Build, Case, Outcomes, a_run_dir, both
from vmharness.errors import HarnessError
from vmharness.rundir.store import RunDir

RUNS = Path(__file__).parent / "golden" / "runs"
Edit = Callable[[Path], None]  # changes a run folder in place
Rec = dict[str, Any]


def _lines(folder: Path) -> list[str]:
    return (folder / "records.jsonl").read_text().splitlines(keepends=True)


def _json(rec: Rec) -> str:
    return json.dumps(rec, sort_keys=True) + "\n"


def at(n: int, change: Callable[[Rec], Rec | None]) -> Edit:
    """The record on line `n` (1-based) replaced by what `change` makes of it (None: the line deleted)."""
    def edit(folder: Path) -> None:
        lines = _lines(folder)
        new = change(json.loads(lines[n - 1]))
        lines[n - 1] = "" if new is None else _json(new)
        (folder / "records.jsonl").write_text("".join(lines))
    return edit


def gone(*numbers: int) -> Edit:
    def edit(folder: Path) -> None:
        lines = _lines(folder)
        (folder / "records.jsonl").write_text("".join(x for i, x in enumerate(lines, 1) if i not in numbers))
    return edit


def added(make: Callable[[list[Rec]], Rec]) -> Edit:
    """A record appended, made from the folder's records."""
    def edit(folder: Path) -> None:
        recs = [json.loads(x) for x in _lines(folder)]
        with (folder / "records.jsonl").open("a") as f:
            f.write(_json(make(recs)))
    return edit


def text(name: str, old: str, new: str, line: int | None = None) -> Edit:
    """The first `old` in file `name` (in its line `line`, if given) written as `new`: what a parser sees."""
    def edit(folder: Path) -> None:
        lines = (folder / name).read_text().splitlines(keepends=True)
        i = line - 1 if line is not None else next(i for i, x in enumerate(lines) if old in x)
        assert old in lines[i], (name, old)
        lines[i] = lines[i].replace(old, new, 1)
        (folder / name).write_text("".join(lines))
    return edit


def manifest(change: Callable[[Rec], None]) -> Edit:
    def edit(folder: Path) -> None:
        m = json.loads((folder / "manifest.json").read_text())
        change(m)
        (folder / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    return edit


def folder(which: str, *edits: Edit, name: str = "rd") -> Build:
    """A real run's (`run`) or bench's (`bench`) folder at `name`, then `edits`."""
    def build(cwd: Path) -> None:
        (cwd / name).mkdir()
        with tarfile.open(RUNS / f"{which}.tar.xz") as t:
            t.extractall(cwd / name, filter="data")
        for e in edits:
            e(cwd / name)
    return build


# the real run's records.jsonl, by line: 1 session baseline 0, 2 capacity, 3 idle baseline 0, 5-8 the
# boot's points (5 baseline/2/0, 6 baseline/8/0), 9 load_target, 10 load baseline/@50%/0, 13 pti/2/0,
# 14 pti/8/0, 19 pti/8/1, 22 idle baseline 1; its peak is 8 connections. The bench's: 3 baseline/2/0,
# 7 load_target, 8 load baseline/@25%/0.
PEAK_LINE = 6


def _set(rec: Rec, path: str, value: Any) -> Rec:
    *parents, last = path.split(".")
    here = rec
    for p in parents:
        here = here.setdefault(p, {})
    here[last] = value
    return rec


def counted(recs: list[Rec], shorter_server: int) -> Rec:
    """A counted point ([explain] syscalls) of the baseline at the peak, made of its measured point."""
    base = {k: v for k, v in recs[PEAK_LINE - 1].items() if k != "key"}
    return {**base, "kind": "syscalls", "key": "baseline/syscalls/0",
            "syscalls": {"server": 9900, "by_call": {"recvfrom": 4950, "writev": 4950}, "all": 12000, "dropped": 0},
            "shorter": {"seconds": 1, "requests": 100, "server": shorter_server,
                        "by_call": {"recvfrom": shorter_server // 2, "writev": shorter_server // 2},
                        "all": shorter_server + 100, "dropped": 0}}


def stacks(ns: int) -> str:
    return f"baseline;nginx;entry_SYSCALL_64_[k];syscall_enter_from_user_mode_[k] {ns}\n"


def profiled(ns: int) -> Edit:
    """A profiled point ([explain] profile) of the baseline at the peak, its stacks holding `ns` of CPU."""
    body = stacks(ns)

    def edit(folder: Path) -> None:
        (folder / "profiles").mkdir()
        (folder / "profiles" / "baseline-0.folded").write_text(body)
        added(lambda recs: {**{k: v for k, v in recs[PEAK_LINE - 1].items() if k != "key"}, "kind": "profile",
                            "key": "baseline/profile/0",
                            "profile": {"file": "profiles/baseline-0.folded", "frequency": 999, "bytes": len(body),
                                        "sha256": hashlib.sha256(body.encode()).hexdigest()}})(folder)
    return edit


def host_state(machine_id: str, boot_id: str, cmdline: str = "ro quiet") -> Edit:
    state = {"boot_id": boot_id, "cmdline": cmdline, "microcode": "0x1000065", "smt": {"control": "on", "active": "1"},
             "vulnerabilities": {"meltdown": "Not affected"}, "kvm": {}, "machine_id": machine_id,
             "hostname": "lab1", "cpu_model": "AMD EPYC"}
    return manifest(lambda m: m.update(host_state={"start": state, "end": state}))


STUDY = json.dumps({"kind": "run", "config": {"instance": [{"name": "ref"}, {"name": "no-x"}],
                                              "study": {"switches": ["x"], "one_on": False}},
                    "started": "2026-01-01T00:00:00Z", "ended": None})
STUDY_RECORDS = "".join(hostile_kit.measurement(i, c, it, 1000.0 + c - (i != "ref") * 100)
                        for it in range(2) for c in (1, 2) for i in ("ref", "no-x"))
DROPPED = {"kind": "dropped", "instance": "no-x", "iteration": 0, "reason": "changes nothing"}

RD, B = "rd/records.jsonl", "rd/manifest.json"
# (id, the forged folder, its clean twin's id, exit code, needles: of the error line, or of a WARNING line)
FORGED: list[tuple[str, Build, str, int, tuple[str, ...]]] = [
    # a string or a boolean where a boolean or a number belongs (record_check.type_fault)
    ("ok-as-text", folder("run", at(19, lambda r: {**r, "ok": "false"})), "run", 2,
     (f"{RD} line 19 is a measurement record", 'with ok "false", not true or false')),
    ("throughput-as-text", folder("bench", at(3, lambda r: _set(r, "client.requests_per_s", "90000"))), "bench", 2,
     (f"{RD} line 3", 'with client.requests_per_s "90000", not a number')),
    ("rate-as-text", folder("bench", at(8, lambda r: {**r, "rate": "1e9"})), "bench", 2,
     (f"{RD} line 8 is a load record", 'with rate "1e9", not a number')),
    ("requests-as-true", folder("run", at(5, lambda r: _set(r, "client.requests", True))), "run", 2,
     (f"{RD} line 5", "with client.requests true, not a number")),
    ("connections-as-text", folder("run", at(PEAK_LINE, lambda r: {**r, "connections": "8"})), "run", 2,
     (f"{RD} line 6", 'with connections "8", not a number')),
    ("idle-as-text", folder("run", at(3, lambda r: {**r, "vcpu_busy_percent": ["12.3"]})), "run", 2,
     (f"{RD} line 3 is a idle record", 'with vcpu_busy_percent.0 "12.3", not a number')),
    # a key given twice (jsontext.py): in a record mid-file, in the last one (not a torn line), in the manifest
    ("a-key-twice", folder("run", text("records.jsonl", '"ok": true', '"ok": false, "ok": true', 14)), "run", 2,
     (f"{RD} line 14", 'the key "ok" twice')),
    ("a-key-twice-last-line", folder("run", text("records.jsonl", '"ok": true', '"ok": false, "ok": true', 28)),
     "run", 2, (f"{RD} line 28", 'the key "ok" twice')),
    ("a-manifest-key-twice", folder("run", text("manifest.json", '"kind": "run"', '"kind": "bench", "kind": "run"')),
     "run", 2, (B, 'the key "kind" twice')),
    # counts for an instance or a connection count the run never had (cross_check.py)
    ("an-instance-never-in-the-run", folder("run", at(13, lambda r: {**r, "instance": "ghost", "key": "ghost/2/0"})),
     "run", 0, (f"{RD}:13", "its instance 'ghost' is not one of the run's")),
    ("an-idle-of-an-unknown-instance", folder("run", at(22, lambda r: {**r, "instance": "ghost"})), "run", 0,
     (f"{RD}:22", "its instance 'ghost'")),
    ("a-count-never-swept", folder("run", at(PEAK_LINE, lambda r: {**r, "connections": 4, "key": "baseline/4/0"})),
     "run", 0, (f"{RD}:6", "connections 4 is not a count the run's sweep measures")),
    ("a-load-target-off-the-sweep", folder("bench", at(7, lambda r: {**r, "connections": 4})), "bench", 0,
     (f"{RD}:7", "connections 4 is not a count")),
    ("a-load-percent-never-planned", folder("bench", at(8, lambda r: {**r, "percent": 60, "key": "baseline/@60%/0"})),
     "bench", 0, (f"{RD}:8", "its percent 60 is not one of the run's load.percents [25, 50, 75, 90]")),
    # VM exits in a run whose guests ran under TCG
    ("exits-under-tcg", folder("run", at(PEAK_LINE, lambda r: _set(r, "host.kvm_exits", {"exits": 9_000_000}))),
     "run", 0, (f"{RD}:6", "it counts VM exits, but manifest.json says the guests ran under TCG")),
    # a counted point whose shorter load counted more calls than its load
    ("shorter-load-more-calls", folder("run", added(lambda recs: counted(recs, 99_000))), "counted", 0,
     (f"{RD}:29", "its shorter load counted more calls than its load (server: 99000 against 9900)")),
    # a study's dropped record: for an instance no study has, for one measured after it
    ("dropped-without-a-study", folder("run", added(lambda _: {**DROPPED, "instance": "pti"})), "run", 0,
     (f"{RD}:29", "the run has no study instance 'pti' to drop")),
    ("dropped-yet-measured", both(a_run_dir(STUDY, STUDY_RECORDS + _json(DROPPED))), "study", 0,
     ("rd/records.jsonl:9", "'no-x' was measured in iteration 1, after it was dropped in iteration 0")),
    # a profile holding more CPU time than its point could (analysis/profiles.py)
    ("profile-more-cpu-than-could", folder("run", profiled(500 * 10**9)), "profiled", 2,
     (RD, "'baseline/profile/0' is damaged", "500.0 s of CPU time, more than its point could")),
    # what the manifest says was recorded, gone
    ("a-tallied-record-gone", folder("run", gone(14)), "run", 0,
     (RD, "tally counts 16 points measured, and the records hold 15: 1 missing")),
    ("the-idle-records-gone", folder("run", gone(3, 22)), "run", 0,
     (RD, "no idle record of baseline's boot(s) in iteration 0, 1")),
    ("one-idle-record-gone", folder("run", gone(22)), "run", 0, (RD, "no idle record of baseline's boot(s) in "
                                                                     "iteration 1", "of the other boots")),
]
CLEAN: list[tuple[str, Build]] = [
    ("run", folder("run")), ("bench", folder("bench")),
    ("counted", folder("run", added(lambda recs: counted(recs, 500)))),
    # the guest's other processes made more calls in the shorter load (a demo's run under TCG: 5,314
    # against 4,666), which per_request never reads; and a shorter load that served as many requests
    ("counted-others-busier-in-the-shorter-load",
     folder("run", added(lambda recs: _set(counted(recs, 500), "shorter.all", 50_000)))),
    # one call of the server's more often in the shorter load (a demo's run under TCG: epoll_wait 35
    # against 34: it returns as often as the server waits), its total still fewer
    ("counted-one-call-more-in-the-shorter-load",
     folder("run", added(lambda recs: _set(counted(recs, 5000), "shorter.by_call", {"recvfrom": 49, "writev": 4951})))),
    ("counted-the-shorter-load-served-as-many",
     folder("run", added(lambda recs: _set(counted(recs, 99_000), "shorter.requests", 10**9)))),
    ("profiled", folder("run", profiled(2 * 10**9))),
    ("study", a_run_dir(STUDY, STUDY_RECORDS)),
]
# compare: each run's own warnings kept, and another machine said as such
COMPARE: list[tuple[str, Build, str, tuple[str, ...]]] = [
    ("compare-another-cpu", both(folder("run"), folder("run", manifest(
        lambda m: m["host"].update(cpu_model="Intel(R) Xeon(R) Gold 6338")), name="rd2")), "compare-clean",
     ("host: rd2 ran on another machine than rd (cpu_model 'AMD EPYC' -> 'Intel(R) Xeon(R) Gold 6338')",)),
    ("compare-another-machine-id", both(folder("run", host_state("m1", "b1")),
                                        folder("run", host_state("m2", "b2", "ro"), name="rd2")),
     "compare-same-host", ("host: rd2 ran on another machine than rd (machine_id 'm1' -> 'm2')",)),
    ("compare-another-boot", both(folder("run", host_state("m1", "b1")),
                                  folder("run", host_state("m1", "b2", "ro"), name="rd2")),
     "compare-same-host", ("host: rd2 ran on another boot of the host than rd: cmdline",)),
    ("compare-keeps-a-runs-missing-records", both(folder("run"), folder("run", gone(3, 22), name="rd2")),
     "compare-clean", ("rd2/records.jsonl: no idle record of baseline's boot(s) in iteration 0, 1",)),
    ("compare-keeps-a-runs-host-change", both(folder("run"), folder("run", host_state("m1", "b1"), manifest(
        lambda m: m["host_state"].update(end={**m["host_state"]["end"], "cmdline": "pti=on"})), name="rd2")),
     "compare-clean", ("rd2: the host changed during the run: cmdline: 'ro quiet' -> 'pti=on'",)),
]
COMPARE_CLEAN = [("compare-clean", both(folder("run"), folder("run", name="rd2"))),
                 ("compare-same-host", both(folder("run", host_state("m1", "b1")),
                                            folder("run", host_state("m1", "b1"), name="rd2")))]


def _cases() -> list[Case]:
    c = [Case(cid, ("report", "rd"), needles, build, code=code) for cid, build, _, code, needles in FORGED]
    c += [Case(cid, ("report", "rd"), ("ANSWER",), build, code=0) for cid, build in CLEAN]
    c += [Case(cid, ("compare", "rd", "rd2"), needles, build, code=0) for cid, build, _, needles in COMPARE]
    c += [Case(cid, ("compare", "rd", "rd2"), ("ANSWER",), build, code=0) for cid, build in COMPARE_CLEAN]
    return c


CASES = _cases()
outcomes = hostile_kit.fixture(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_forged_record_ends_as_the_table_says(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize(("cid", "twin", "needles"), [(f[0], f[2], f[4]) for f in FORGED if f[3] == 0]
                         + [(f[0], f[2], f[3]) for f in COMPARE], ids=[f[0] for f in FORGED if f[3] == 0]
                         + [f[0] for f in COMPARE])
def test_never_the_clean_answer_without_a_warning(cid: str, twin: str, needles: tuple[str, ...],
                                                  outcomes: Outcomes) -> None:
    """The forged folder's report says the fault in a WARNING of its own (the report's text, not only
    stderr), and is not the clean folder's report."""
    o, clean = outcomes.by_case[cid], outcomes.by_case[twin]
    warned = [line for line in o.stdout.splitlines() if line.startswith("WARNING: ")]
    assert any(all(n in line for n in needles) for line in warned), o.stdout[:3000]
    assert not any(all(n in line for n in needles) for line in clean.stdout.splitlines())
    assert o.stdout != clean.stdout


def test_the_clean_folders_report_without_these_warnings(outcomes: Outcomes) -> None:
    for cid, _ in CLEAN + COMPARE_CLEAN:
        o = outcomes.by_case[cid]
        assert not any(w in o.stdout + o.stderr for w in ("left out of every figure", "contradicting the run",
                                                           "missing (deleted or cut)", "no idle record",
                                                           "another machine")), (cid, o.stdout[:2000])


# the resume reader: the same records, the same rules (store.RunDir.records)
@pytest.mark.parametrize(("edit", "key"), [
    (at(13, lambda r: {**r, "instance": "ghost", "key": "ghost/2/0"}), "ghost/2/0"),
    (at(PEAK_LINE, lambda r: {**r, "connections": 4, "key": "baseline/4/0"}), "baseline/4/0"),
    (at(PEAK_LINE, lambda r: _set(r, "host.kvm_exits", {"exits": 9_000_000})), "baseline/8/0"),
], ids=["an-instance-never-in-the-run", "a-count-never-swept", "exits-under-tcg"])
def test_resume_measures_again_what_a_forged_record_claims(tmp_path: Path, edit: Edit, key: str) -> None:
    folder("run")(tmp_path)
    clean = RunDir.open(tmp_path / "rd").completed()
    folder("run", edit, name="forged")(tmp_path)
    run = RunDir.open(tmp_path / "forged")
    done = run.completed()
    assert key not in done and done <= clean and len(clean - done) == 1, sorted(clean ^ done)
    assert run.left_out and run.left_out[0][1] == "contradicting the run"


@pytest.mark.parametrize(("edit", "fault"), [
    (at(19, lambda r: {**r, "ok": "false"}), 'line 19 is a measurement record with ok "false", not true or false'),
    (at(5, lambda r: _set(r, "client.requests", True)), "line 5 is a measurement record with client.requests true"),
    (text("records.jsonl", '"ok": true', '"ok": false, "ok": true', 14),
     'line 14 is not JSON: it gives the key "ok" twice'),
], ids=["ok-as-text", "requests-as-true", "a-key-twice"])
def test_resume_refuses_what_the_report_refuses(tmp_path: Path, edit: Edit, fault: str) -> None:
    """`"ok": "false"` is never taken as measured: the reader refuses the folder, for --resume as for report."""
    folder("run", edit)(tmp_path)
    with pytest.raises(HarnessError, match=re.escape(fault)):
        RunDir.open(tmp_path / "rd").completed()


def test_another_machine_is_not_called_another_boot(outcomes: Outcomes) -> None:
    o = outcomes.by_case["compare-another-machine-id"]
    assert "host: rd2 ran on another machine than rd: cmdline: 'ro quiet' -> 'ro'" in o.stdout
    assert "another boot" not in o.stdout
