"""A RunDir reads records.jsonl once and keeps what it read (rundir/store.py, `RunDir.records`): what it
hands out must always be what a fresh read of the file gives, whoever wrote to the file since, and a
file that fails its checks must fail at every call, as before records were kept."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmharness.errors import HarnessError
from vmharness.rundir import jsontext, store
from vmharness.rundir.store import RECORDS, RunDir

MANIFEST = {"kind": "bench", "config": {"instance": [{"name": "a"}, {"name": "b"}]}}
TORN = '{"kind": "measurement", "key": "a/1/0", "ok": true, "instance": "a", "connections": 1, "it'


def record(inst: str, conns: int, it: int, ok: bool = True) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": "measurement", "key": f"{inst}/{conns}/{it}", "ok": ok, "instance": inst,
                           "connections": conns, "iteration": it, "samples": {}}
    if ok:
        rec["client"] = {"requests_per_s": 1000.0 + conns, "requests": 10000, "errors": {"total": 0},
                         "latency_us": {"percentiles": {"50": 100, "90": 200, "99": 300, "99.9": 400}}}
    return rec


def fresh(path: Path) -> tuple[list[dict[str, Any]], list[tuple[int, str, str]]]:
    run = RunDir.open(path)
    return list(run.records()), run.left_out


def test_each_line_is_parsed_once_however_often_the_records_are_asked_for(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunDir.create(tmp_path / "rd", MANIFEST)
    for it in range(3):
        for c in (1, 2):
            run.append(record("a", c, it))
    parsed: list[str] = []
    real = jsontext.line

    def counting(line: str) -> tuple[Any, bool]:
        parsed.append(line)
        return real(line)

    monkeypatch.setattr(jsontext, "line", counting)
    reader = RunDir.open(run.path)
    first = list(reader.records())
    assert [r["key"] for r in first] == [f"a/{c}/{it}" for it in range(3) for c in (1, 2)]
    assert list(reader.records()) == first and reader.completed() == {r["key"] for r in first}
    assert len(parsed) == 6  # once per line, not once per call


def test_an_append_through_the_same_run_folder_is_seen_at_once(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "rd", MANIFEST)
    assert list(run.records()) == []
    run.append(record("a", 1, 0))
    assert [r["key"] for r in run.records()] == ["a/1/0"]
    run.append(record("a", 2, 0, ok=False))
    assert [r["key"] for r in run.records()] == ["a/1/0", "a/2/0"] and run.completed() == {"a/1/0"}
    run.append(record("a", 2, 0))  # the retry --resume makes
    assert run.completed() == {"a/1/0", "a/2/0"}


def test_an_append_through_the_same_run_folder_is_seen_whatever_the_file_looks_like(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even where the file's identity would not tell (an append of a torn tail's length, in one tick)."""
    monkeypatch.setattr(store, "identity_of", lambda path: ((0,), b""))
    run = RunDir.create(tmp_path / "rd", MANIFEST)
    run.append(record("a", 1, 0))
    assert [r["key"] for r in run.records()] == ["a/1/0"]
    run.append(record("b", 1, 0))
    assert [r["key"] for r in run.records()] == ["a/1/0", "b/1/0"]


class StillClock:
    """The os module as store.py sees it, but a file's times never move: a coarse clock (ext4 stamps a
    change with the kernel's tick) that two writes fall within."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def stat(self, path: Path) -> SimpleNamespace:
        s = os.stat(path)
        return SimpleNamespace(st_mode=s.st_mode, st_dev=s.st_dev, st_ino=s.st_ino, st_size=s.st_size,
                               st_mtime_ns=0, st_ctime_ns=0)


def test_another_writer_cutting_a_torn_tail_and_appending_as_many_bytes_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file's size and inode stay as they were, and within one tick of the clock its times too:
    what was kept must still not be handed out."""
    monkeypatch.setattr(store, "os", StillClock())
    reader = RunDir.create(tmp_path / "rd", MANIFEST)
    reader.append(record("a", 1, 0))
    rec = record("b", 1, 0)
    line = json.dumps({"time": "2026-01-01T00:00:00Z", **rec}, sort_keys=True) + "\n"  # the length append writes
    with (reader.path / RECORDS).open("a") as f:
        f.write(TORN + "x" * (len(line) - len(TORN)))
    size = (reader.path / RECORDS).stat().st_size
    assert [r["key"] for r in reader.records()] == ["a/1/0"]  # the torn line left out, and kept so
    RunDir.open(reader.path).append(rec)
    assert (reader.path / RECORDS).stat().st_size == size
    assert [r["key"] for r in reader.records()] == ["a/1/0", "b/1/0"]


def test_a_file_that_fails_its_checks_fails_at_every_call(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "rd", MANIFEST)
    run.append(record("a", 1, 0))
    run.append(record("a", 1, 0))  # measured twice: left out, or refused with --strict
    strict = RunDir.open(run.path, strict=True)
    for _ in range(2):
        with pytest.raises(HarnessError, match="line 2"):
            list(strict.records())
    with (run.path / RECORDS).open("a") as f:
        f.write("[]\n")
    lenient = RunDir.open(run.path)
    for _ in range(2):
        with pytest.raises(HarnessError, match="line 3 is not a record"):
            list(lenient.records())


def test_a_left_out_record_is_said_once_and_stays_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = RunDir.create(tmp_path / "rd", MANIFEST)
    run.append(record("a", 1, 0))
    run.append(record("a", 1, 0))
    reader = RunDir.open(run.path)
    assert [r["key"] for r in reader.records()] == ["a/1/0"] == [r["key"] for r in reader.records()]
    assert [n for n, _, _ in reader.left_out] == [2] and store.left_out_line([reader])
    assert capsys.readouterr().err.count("warning:") == 1


OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from("ab"), st.integers(1, 2), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("other"), st.sampled_from("ab"), st.integers(1, 2), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("torn"), st.integers(1, len(TORN))),
    st.tuples(st.just("read"),),
), max_size=25)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_the_kept_records_are_always_a_fresh_reads(ops: list[tuple[Any, ...]]) -> None:
    """Appends through the reader, through another RunDir, torn writes (a crash), in any order: after
    each, the long-lived reader hands out what a new one reads, and leaves out the same records."""
    with tempfile.TemporaryDirectory() as tmp:
        reader = RunDir.create(Path(tmp) / "rd", MANIFEST)
        for op in [*ops, ("read",)]:
            if op[0] == "append":
                reader.append(record(*op[1:]))
            elif op[0] == "other":
                RunDir.open(reader.path).append(record(*op[1:]))
            elif op[0] == "torn":
                with (reader.path / RECORDS).open("a") as f:
                    f.write(TORN[:op[1]])
            else:
                got = list(reader.records())
                assert (got, reader.left_out) == fresh(reader.path)
