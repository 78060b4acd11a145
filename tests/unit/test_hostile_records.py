"""Damaged records and escape sequences, through the real command (tests/hostile_kit.py runs each case).

- **Records left out** (rundir/record_check.py): a number that cannot be a measurement (NaN, Infinity,
  1e308, below 0, not whole, percentiles that fall), an unknown kind, a point measured twice or a key
  that is not its fields'. `report` and `compare` exit 0, the first warning counts what was left out and
  names it by file:line, and every figure is the one the same folder gives without the damaged record
  (its clean twin: a damaged record must never change an answer silently). `report --strict` refuses,
  in one line naming the file and the line. `bench --resume` measures a left-out point again (its
  count of points to measure says so) and counts a repeated one once.
- **Escape sequences** (vmharness/textsafe.py) in instance names, run folder names, a session's error,
  a record's key, a value echoed in an error: shown escaped, none reaching stdout or stderr raw; also
  checked byte for byte, with every report form written to files and a host tree's driver and interface
  names.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import forked_cli, hostile_kit
from tests.hostile_kit import GOOD_RECORDS, Build, Case, Outcomes, a_run_dir, both, with_file

RAW = ("\x1b", "\x07", "\x9b", "\x08")  # never in output; \r neither (a text-mode read makes it a line break)
ESC = "\x1b[2J\r\x07\x9b"  # clear the screen, go back to the line's start, ring, a C1 CSI


def point(inst: str = "a", conns: int = 2, it: int = 2, rps: float = 1002.0, **paths: Any) -> dict[str, Any]:
    """A measurement record as the kit's; `paths` ("client__requests": -1) replace nested values."""
    rec: dict[str, Any] = json.loads(hostile_kit.measurement(inst, conns, it, rps))
    rec["client"]["requests_per_s"] = rps  # NaN and Infinity as floats
    for path, value in paths.items():
        *parents, last = path.split("__")
        here = rec
        for p in parents:
            here = here.setdefault(p, {})
        here[last] = value
    return rec


def lines(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def manifest(names: tuple[str, ...] = ("a", "b"), **more: Any) -> str:
    return json.dumps({"kind": "bench", "config": {"instance": [{"name": n} for n in names], **more},
                       "started": "2026-01-01T00:00:00Z", "ended": None})


LOAD_TARGET = {"kind": "load_target", "instance": "a", "connections": 2, "requests_per_s": 1002.0, "iterations": 2,
               "rates": {"50": 501.0}, "from": "the baseline's highest mean"}
CAPACITY = {"kind": "capacity", "machine": "this machine", "connections": 2, "seconds": 2, "closed_per_s": 1e6,
            "open_per_s": None, "error": None}
HERE = "rd/records.jsonl:9"  # the first line after GOOD_RECORDS' eight


def counted(it: int = 0, **calls: Any) -> dict[str, Any]:
    """A counted point's record ([explain] syscalls) of instance a at 2 connections; `calls` replace its counts."""
    return {"kind": "syscalls", "key": f"a/syscalls/{it}", "instance": "a", "connections": 2, "iteration": it,
            "ok": True, "client": {"requests_per_s": 990.0, "requests": 1980},
            "syscalls": {"server": 9900, "by_call": {"recvfrom": 1980, "writev": 1980}, "all": 12000, "dropped": 0,
                         **calls}}


FOLDED = "a;nginx;entry_SYSCALL_64_[k];syscall_enter_from_user_mode_[k] 2002002\n"


def profiled(file: str = "profiles/a-0.folded", digest: str = hashlib.sha256(FOLDED.encode()).hexdigest()
             ) -> dict[str, Any]:
    """A profiled point's record ([explain] profile) of instance a at 2 connections, naming `file`."""
    return {"kind": "profile", "key": "a/profile/0", "instance": "a", "connections": 2, "iteration": 0, "ok": True,
            "client": {"requests_per_s": 990.0, "requests": 1980},
            "profile": {"file": file, "sha256": digest, "bytes": len(FOLDED), "frequency": 999}}


def _link(rel: str, target: str) -> Build:
    def build(cwd: Path) -> None:
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).symlink_to(target)
    return build


# (id, the damaged lines, the lines beside them that stay, needles of the first warning)
DAMAGED: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("nan-throughput", lines(point(rps=math.nan)), "", ("requests_per_s nan is not a finite number",)),
    ("infinite-throughput", lines(point(rps=math.inf)), "", ("requests_per_s inf is not a finite number",)),
    ("huge-throughput", lines(point(rps=1e308)), "", ("requests_per_s 1e+308 is beyond 2**63",)),
    ("negative-throughput", lines(point(rps=-5.0)), "", ("requests_per_s -5 is below 0",)),
    ("a-repeated-key-moving-the-peak", lines(point("a", 1, 1, 5000.0)), "",
     ("1 repeating a point already measured", "'a/1/1'", "measured successfully on an earlier line")),
    ("a-failure-after-the-success", lines({**point("a", 1, 0), "ok": False}), "", ("'a/1/0'", "earlier line")),
    ("negative-connections", lines(point("a", -4, 0)), "", ("connections -4 is below 1",)),
    ("too-many-connections", lines(point("a", 2_000_000, 0)), "", ("connections 2000000 is above 1000000",)),
    ("iteration-beyond-any", lines(point("a", 2, 5000)), "", ("iteration 5000 is above 999",)),
    ("negative-latency", lines(point(client__latency_us__percentiles__50=-100)), "",
     ("percentiles.50 -100 is below 0",)),
    ("latency-falling-with-the-percentile", lines(point(client__latency_us__percentiles__99=150)), "",
     ("p99 150 is below p90 200",)),
    ("negative-requests", lines(point(client__requests=-1000)), "", ("client.requests -1000 is below 0",)),
    ("half-a-request", lines(point(client__requests=1000.5)), "", ("client.requests 1000.5 is not a whole number",)),
    ("negative-errors", lines(point(client__errors__total=-1)), "", ("client.errors.total -1 is below 0",)),
    ("unknown-kind", lines({"kind": "note", "text": "x"}), "", ("1 of an unknown kind", "kind 'note'")),
    ("no-kind", lines({"key": "a/2/2", "ok": True}), "", ("kind none",)),
    ("a-key-not-its-fields", lines({**point("a", 2, 2), "key": "a/2/7"}), "", ("its key 'a/2/7'", "'a/2/2'")),
    # a further measurement in a round (bench/budget.py) is keyed by its repeat, within its bounds
    ("a-repeat-not-in-its-key", lines({**point("a", 2, 2), "repeat": 1}), "", ("its key 'a/2/2'", "'a/2/2/r1'")),
    ("a-repeat-beyond-any", lines({**point("a", 2, 2), "repeat": 5000, "key": "a/2/2/r5000"}), "",
     ("repeat 5000 is above 19",)),
    ("cpu-share-out-of-range", lines(point(samples={"local": {"cpu": {"cpu": {"idle": -50.0}}}})), "",
     ("samples.local.cpu.cpu.idle -50 is below -0.05",)),
    ("vcpu-busy-out-of-range", lines(point(host={"vcpu_busy_percent": [1e6]})), "",
     ("host.vcpu_busy_percent.0 1e+06 is above 200",)),
    ("vcpu-wait-negative", lines(point(host={"vcpu_busy_percent": [90.0], "vcpu_wait_percent": [-3.0]})), "",
     ("host.vcpu_wait_percent.0 -3 is below 0",)),
    ("qemu-other-negative", lines(point(host={"vcpu_busy_percent": [90.0], "qemu_other_percent": -3.0})), "",
     ("host.qemu_other_percent -3 is below 0",)),
    ("a-float-beyond-2-63-anywhere", lines(point(raw=[{"stdout": 1e300}])), "", ("raw.0.stdout 1e+300 is beyond",)),
    ("idle-negative", lines({"kind": "idle", "instance": "a", "iteration": 0, "vcpu_busy_percent": [-5.0]}), "",
     ("idle 'a': vcpu_busy_percent.0 -5 is below 0",)),
    ("session-boot-negative", lines({"kind": "session", "instance": "a", "iteration": 0, "ok": True,
                                     "boot_seconds": -3.0}), "", ("boot_seconds -3 is below 0",)),
    ("a-second-capacity", lines({**CAPACITY, "closed_per_s": 100.0}), lines(CAPACITY),
     ("rd/records.jsonl:10", "a second capacity record of 'this machine'")),
    ("a-second-load-target", lines({**LOAD_TARGET, "requests_per_s": 9e5, "rates": {"50": 4.5e5}}), lines(LOAD_TARGET),
     ("rd/records.jsonl:10", "a second load_target")),
    ("syscalls-negative-count", lines(counted(by_call={"read": -3})), "", ("syscalls.by_call.read -3 is below 0",)),
    ("syscalls-not-whole", lines(counted(server=99.5)), "", ("syscalls.server 99.5 is not a whole number",)),
    ("syscalls-shorter-negative", lines({**counted(), "shorter": {"seconds": 1, "requests": -5, "server": 0,
                                                                  "by_call": {}, "all": 0, "dropped": 0}}), "",
     ("shorter.requests -5 is below 0",)),
    ("syscalls-shorter-call-not-whole", lines({**counted(), "shorter": {"seconds": 1, "requests": 5, "server": 9,
                                                                        "by_call": {"read": 2.5}, "all": 9,
                                                                        "dropped": 0}}), "",
     ("shorter.by_call.read 2.5 is not a whole number",)),
    ("syscalls-counted-twice", lines(counted(server=1)), lines(counted()),
     ("rd/records.jsonl:10", "'a/syscalls/0'", "measured successfully on an earlier line")),
    ("profile-size-negative", lines({**counted(), "kind": "profile", "key": "a/profile/0", "syscalls": None,
                                     "profile": {"file": "profiles/a-0.folded", "sha256": "0" * 64, "bytes": -1,
                                                 "frequency": 999}}), "", ("profile.bytes -1 is below 1",)),
    ("clock-iteration-beyond-any", lines({"kind": "clock", "instance": "a", "iteration": 5000, "at_start": "tsc",
                                          "at_end": "hpet"}), "", ("iteration 5000 is above 999",)),
    ("four-at-once", lines(point(rps=math.nan), {"kind": "x"}, point("a", 1, 1, 9.0), point(rps=-1.0)), "",
     ("4 damaged records", "2 with a number out of range", "1 of an unknown kind", "1 repeating", "and 1 more")),
]


def _folder(kept: str, bad: str = "", name: str = "rd", names: tuple[str, ...] = ("a", "b")) -> Build:
    """A run folder: the kit's good records, then `kept`, then `bad`."""
    return both(with_file(f"{name}/manifest.json", manifest(names)), with_file(f"{name}/records.jsonl",
                                                                             GOOD_RECORDS + kept + bad))


def _named(names: tuple[str, ...], extra: tuple[dict[str, Any], ...] = ()) -> Build:
    """A run folder of instances with these names (each point's key made of it), and `extra` records."""
    recs = [point(n, c, it, 1000.0 + c) for it in range(2) for c in (1, 2) for n in names]
    for r in recs:
        r["key"] = f"{r['instance']}/{r['connections']}/{r['iteration']}"
    return a_run_dir(manifest(names), lines(*recs, *extra))


def _cases() -> list[Case]:
    c = [Case("clean", ("report", "rd", "--full"), ("saturation point 2 connections",),
              a_run_dir(manifest(), GOOD_RECORDS), code=0)]
    for cid, bad, kept, needles in DAMAGED:
        c.append(Case(cid, ("report", "rd", "--full"), ("WARNING: ", "left out of every figure",
                                                       HERE if not kept else "", *needles), _folder(kept, bad), code=0))
        if kept:
            c.append(Case(f"{cid}--clean", ("report", "rd", "--full"), ("saturation point",), _folder(kept), code=0))
    nan, again, kind = DAMAGED[0][1], DAMAGED[4][1], DAMAGED[14][1]
    c += [
        Case("json-nan-throughput", ("report", "rd", "--json"), ('"1 damaged record', HERE), _folder("", nan), code=0),
        Case("json-clean", ("report", "rd", "--json"), ('"peak_connections": 2',), _folder(""), code=0),
        Case("syscalls-without-its-calls", ("report", "rd"), ("rd/records.jsonl: the syscalls record 'a/syscalls/0' is "
                                                              "damaged (KeyError: 'by_call')",),
             _folder("", lines({**counted(), "syscalls": {"server": 10, "all": 12, "dropped": 0}}))),
        Case("strict-nan", ("report", "rd", "--strict"), ("rd/records.jsonl line 9", "nan is not a finite number"),
             _folder("", nan)),
        Case("strict-a-repeated-key", ("report", "rd", "--strict"), ("rd/records.jsonl line 9", "'a/1/1'",
                                                                     "measured successfully"), _folder("", again)),
        Case("strict-unknown-kind", ("report", "rd", "--strict"), ("line 9", "kind 'note'"), _folder("", kind)),
        # text where a figure belongs: no measurement at all, refused (record_check.type_fault)
        Case("a-repeat-as-text", ("report", "rd"), ("rd/records.jsonl line 9", 'with repeat "1", not a number'),
             _folder("", lines({**point("a", 2, 2), "repeat": "1", "key": "a/2/2/r1"}))),
        Case("qemu-other-as-text", ("report", "rd"), ("rd/records.jsonl line 9", 'host.qemu_other_percent "all", not a '
                                                                    "number"),
             _folder("", lines(point(host={"vcpu_busy_percent": [90.0], "qemu_other_percent": "all"})))),
        Case("strict-clean", ("report", "rd", "--strict", "--full"), ("saturation point 2 connections",), _folder(""),
             code=0),
        Case("compare-one-run-damaged", ("compare", "rd", "rd2", "--full"), ("1 damaged record", "rd2/records.jsonl:9"),
             both(_folder(""), _folder("", again, "rd2")), code=0),
        Case("compare-one-run-damaged--clean", ("compare", "rd", "rd2", "--full"), ("saturation point",),
             both(_folder(""), _folder("", "", "rd2")), code=0),
        Case("compare-strict", ("compare", "rd", "rd2", "--strict"), ("rd2/records.jsonl line 9", "'a/1/1'"),
             both(_folder(""), _folder("", again, "rd2"))),
        # a profile's folded stacks: a file of the run folder's profiles/, as its record says, or an error
        Case("profile-clean", ("report", "rd", "--full"), ("what grew per request",),
             both(_folder(lines(profiled())), with_file("rd/profiles/a-0.folded", FOLDED)), code=0),
        Case("profile-a-link-out", ("report", "rd"), ("rd/profiles/a-0.folded", "link"),
             both(_folder(lines(profiled())), _link("rd/profiles/a-0.folded", "/etc/hostname"))),
        Case("profile-path-up", ("report", "rd"), ("../../etc/hostname",),
             both(_folder(lines(profiled("profiles/../../etc/hostname"))),
                  with_file("rd/profiles/a-0.folded", FOLDED))),
        Case("profile-not-its-digest", ("report", "rd"), ("rd/profiles/a-0.folded", "digest"),
             both(_folder(lines(profiled(digest="0" * 64))), with_file("rd/profiles/a-0.folded", FOLDED))),
        Case("profile-a-damaged-line", ("report", "rd"), ("rd/profiles/a-0.folded", "line 1"),
             both(_folder(lines(profiled(digest=hashlib.sha256(b"$(reboot) x\n").hexdigest()))),
                  with_file("rd/profiles/a-0.folded", "$(reboot) x\n"))),
        # escape sequences
        Case("escape-instance-name", ("report", "rd", "--full"), ("saturation point", "a\\x1b[2J\\x0d\\x07\\x9b"),
             _named((f"a{ESC}", "b")), code=0),
        Case("escape-session-error", ("report", "rd", "--full"), ("measured nothing", "\\x1b[2J\\x0d\\x07\\x9b"),
             _folder(lines({"kind": "session", "instance": "a", "iteration": 2, "ok": False, "error": f"boom{ESC}"})),
             code=0),
        # a boot's clocksource as its guest wrote it: a name of a clock is said, anything else is not
        Case("escape-clock-name", ("report", "rd", "--full"), ("clocksource went from tsc to an unreadable clock",),
             _folder(lines({"kind": "clock", "instance": "a", "iteration": 1, "at_start": "tsc",
                            "at_end": f"hpet{ESC}"})), code=0),
        Case("escape-in-a-left-out-key", ("report", "rd", "--full"), ("left out", "\\x1b]0;pwned\\x07"),
             _folder("", lines(point("\x1b]0;pwned\x07", 2, 0, rps=-1.0))), code=0),
        Case("escape-folder-name", ("compare", "rd", f"r{ESC}d", "--full"), ("vs rd/a", "r\\x1b[2J\\x0d\\x07\\x9bd/a"),
             both(_folder(""), _folder("", "", f"r{ESC}d")), code=0),
        Case("escape-in-an-error", ("report", f"nope{ESC}"), ("no run directory nope\\x1b[2J\\x0d\\x07\\x9b",)),
        Case("escape-in-strict-error", ("report", "rd", "--strict"), ("kind '\\x1b[2J\\r\\x07\\x9b'",),
             _folder("", lines({"kind": ESC}))),
    ]
    return c


CASES = _cases()
outcomes = hostile_kit.fixture(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_damaged_record_or_an_escape_ends_as_the_table_says(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
    o = outcomes.by_case[case.id]
    assert not any(c in o.stdout + o.stderr for c in RAW), (o.stdout + o.stderr)[-2000:]


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


def _twin(cid: str) -> str:
    return f"{cid}--clean" if any(c.id == f"{cid}--clean" for c in CASES) else "clean"


def _count(lines: list[str]) -> tuple[list[str], int]:
    """The lines with the answer's count of warnings taken out, and that count (0: none)."""
    out, n = [], -1
    for line in lines:
        if line.startswith("ANSWER") and (m := re.search(r"(\d+) warnings?\b|no warnings", line)):
            n = int(m.group(1) or 0)
            line = line[:m.start()] + "COUNT" + line[m.end():]
        out.append(line)
    return out, n


def _the_clean_twin(rest: list[str], clean: list[str]) -> None:
    """The damaged run's lines after its first warning and what to do about it are the clean twin's, but
    for the answer's count of warnings, one more (the damaged records' warning)."""
    (got, n), (want, m) = _count(rest), _count(clean)
    assert got == want and n == m + 1 and m >= 0, (n, m)


@pytest.mark.parametrize("cid", [d[0] for d in DAMAGED])
def test_the_warning_comes_first_and_the_figures_are_the_clean_twins(cid: str, outcomes: Outcomes) -> None:
    """The first line of the report counts what was left out; every other line is the report of the
    same folder without the damaged lines, word for word."""
    o, clean = outcomes.by_case[cid], outcomes.by_case[_twin(cid)]
    first, do, *rest = o.stdout.splitlines()
    assert first.startswith("WARNING: ") and "left out of every figure" in first and do.startswith("  do: ")
    _the_clean_twin(rest, clean.stdout.splitlines())
    assert "left out" not in clean.stdout + clean.stderr
    assert o.stderr.count("left out of every figure") == 1  # said once on stderr too (report --out says no more)


def test_json_puts_the_warning_first_and_the_same_rows(outcomes: Outcomes) -> None:
    got, clean = (json.loads(outcomes.by_case[c].stdout) for c in ("json-nan-throughput", "json-clean"))
    assert got["warnings"][0].startswith("1 damaged record left out of every figure")
    assert got["warnings"][1:] == clean["warnings"] and got["rows"] == clean["rows"] and got["peak"] == clean["peak"]


def test_compare_warns_first_and_keeps_its_figures(outcomes: Outcomes) -> None:
    o, clean = outcomes.by_case["compare-one-run-damaged"], outcomes.by_case["compare-one-run-damaged--clean"]
    first, do, *rest = o.stdout.splitlines()
    assert "rd2/records.jsonl:9" in first and do.startswith("  do: ")
    _the_clean_twin(rest, clean.stdout.splitlines())


def test_there_are_enough_cases() -> None:
    assert len(DAMAGED) >= 20 and len(CASES) >= 40


# bench --resume: the real command up to the start of its measuring, refused there (client.oha is not
# oha), so that nothing is measured: its count of points to measure shows what --resume counts as done.
RESUME_MANIFEST = json.dumps({"kind": "bench", "id": "0123456789", "started": "2026-01-01T00:00:00Z", "ended": None,
                              "config": {"instance": [{"name": "a"}, {"name": "b"}],
                                         "client": [{"host": "local", "oha": "/nonexistent/oha"}],
                                         "sweep": {"connections": "1,2", "iterations": 2},
                                         "load": {"percents": [50], "capacity": 0}}})


def _resume(cwd: Path, records: str) -> subprocess.CompletedProcess[str]:
    a_run_dir(RESUME_MANIFEST, records)(cwd)
    (cwd / "rd" / "samples").mkdir()  # a whole run directory (--resume refuses one without it)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_")}
    return forked_cli.call(["bench", "--resume", "rd"], cwd, env, timeout=120, text=True)


@pytest.mark.parametrize(("records", "todo", "done", "why"), [
    (GOOD_RECORDS, 0, 8, None),
    (GOOD_RECORDS.replace('"requests_per_s": 1001', '"requests_per_s": NaN', 1), 1, 7, "not a finite number"),
    (GOOD_RECORDS + lines(point("a", 1, 1, 5000.0)), 0, 8, "repeating a point already measured"),
    (GOOD_RECORDS + lines({**point("a", 1, 0), "ok": False}), 0, 8, "repeating a point already measured"),
    (GOOD_RECORDS + lines({**point("a", 2, 0), "key": "b/1/0"}), 0, 8, "its key 'b/1/0'"),
    (GOOD_RECORDS + lines(point("ghost", 2, 0)), 0, 8, "its instance 'ghost' is not one of the run's"),
    (GOOD_RECORDS + lines(point("a", 4, 0)), 0, 8, "connections 4 is not a count the run's sweep measures"),
], ids=["clean", "nan", "repeated", "failure-after-success", "key-not-its-fields", "unknown-instance",
        "a-count-never-swept"])
def test_resume_measures_a_left_out_point_again_and_a_repeated_one_once(
        tmp_path: Path, records: str, todo: int, done: int, why: str | None) -> None:
    before = (tmp_path / "rd").exists()
    res = _resume(tmp_path, records)
    assert not before and res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    said = res.stderr.splitlines()
    assert f"  {todo} points to measure ({done} already in rd)" in said, res.stderr
    assert said[-2].startswith("error: client.oha '/nonexistent/oha'") and said[-1].startswith("hint: ")
    warned = [line for line in said if "left out of every figure" in line]
    assert (len(warned), why is None or why in warned[0]) == (0 if why is None else 1, True), res.stderr
    assert (tmp_path / "rd" / "records.jsonl").read_text() == records  # nothing written to it


def test_resume_refuses_an_ok_that_is_not_true_or_false(tmp_path: Path) -> None:
    """`"ok": "false"` is true to `if`: bench --resume would skip the point as measured; it refuses the
    folder in one line naming the file and the line, before it measures anything."""
    records = GOOD_RECORDS.replace('"ok": true', '"ok": "false"', 1)
    res = _resume(tmp_path, records)
    said = res.stderr.splitlines()
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert said[-2].startswith("error: rd/records.jsonl line 1 is a measurement record with ok \"false\""), said
    assert said[-1].startswith("hint: ") and (tmp_path / "rd" / "records.jsonl").read_text() == records


def test_the_escaped_name_is_shown_where_the_raw_one_was(outcomes: Outcomes) -> None:
    o = outcomes.by_case["escape-instance-name"]
    assert "baseline a\\x1b[2J\\x0d\\x07\\x9b: saturation point 2 connections" in o.stdout
    assert o.stdout.count("a\\x1b[2J\\x0d\\x07\\x9b") >= 3  # the answer and the table's rows
