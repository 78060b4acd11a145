"""The harness never writes a point's key twice (rundir/record_check.py's rule: a key's failed attempts,
then at most one success), also across `--resume` after a kill at any moment: the real sweep
(bench/sweep.py: the grid, its added iterations, the open-loop load, the adaptive search) with its
measurement, servers and samplers replaced, killed right after each of its appends in turn, or halfway
through one (a torn line), then resumed to its end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vmharness.bench import capacity, clients, plan, sampler, sweep
from vmharness.model import config, sections
from vmharness.rundir import record_check
from vmharness.rundir.store import RECORDS, RunDir

OWNER = "run:0123456789"


class Killed(BaseException):
    """The harness dying (SIGKILL): raised from inside an append, nothing of the sweep runs after it
    but its `finally` (servers and samplers, faked here)."""


def _rps(point: plan.Point) -> float:
    """A curve with a peak at 16 connections, instance b 10% lower; a load point at its rate."""
    top = {1: 400.0, 2: 700.0, 4: 900.0, 8: 1000.0, 16: 1100.0, 32: 1050.0, 64: 800.0}.get(point.connections, 500.0)
    return top * (0.9 if point.instance == "b" else 1.0) * (1 + 0.01 * point.iteration)


def _result(point: plan.Point, ok: bool) -> dict[str, Any]:
    if not ok:
        return {"ok": False, "attempts": 2, "failed_attempts": []}
    latency = {"percentiles": {"50": 100, "90": 200, "99": 300, "99.9": 400}}
    return {"ok": True, "attempts": 1, "start": 1.0, "end": 2.0, "measured_end": 2.0, "samples": {},
            "client": {"requests_per_s": _rps(point), "requests": 1000, "errors": {"total": 0},
                       "latency_us": latency}, "raw": [], "failed_attempts": []}


@pytest.fixture
def fake_sweep(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The sweep's own logic, its machines faked: every point measured at once; the first attempt ever
    at `state["fails"]` keys fails (a retry comes with --resume); a kill after append number
    `state["kill_at"]` (or halfway through it, with `state["torn"]`)."""
    state: dict[str, Any] = {"appends": 0, "kill_at": None, "torn": False, "fails": set(), "failed": set()}
    monkeypatch.setattr(clients.Client, "prepare", lambda self, root, owner, open_loop=False: None)
    monkeypatch.setattr(clients.Client, "done", lambda self, root: None)
    monkeypatch.setattr(capacity, "measure", lambda *a: None)
    monkeypatch.setattr(sampler.Samplers, "start", lambda self, machines: None)
    monkeypatch.setattr(sampler.Samplers, "stop", lambda self: None)
    monkeypatch.setattr(sweep.Sweep, "_serve", lambda self, name, restart: None)
    monkeypatch.setattr(sweep.Sweep, "drain", lambda self, srv: None)

    def measure(self: sweep.Sweep, samplers: Any, point: plan.Point, srv: Any) -> dict[str, Any]:
        fails = point.key in state["fails"] and point.key not in state["failed"]
        state["failed"].add(point.key)
        return _result(point, not fails)

    monkeypatch.setattr(sweep.Sweep, "measure", measure)
    real_append = RunDir.append

    def append(self: RunDir, record: dict[str, Any]) -> None:
        state["appends"] += 1
        if state["appends"] == state["kill_at"] and state["torn"]:
            with (self.path / RECORDS).open("a") as f:
                f.write(json.dumps(record)[:40])  # the write cut short
            raise Killed()
        real_append(self, record)
        if state["appends"] == state["kill_at"]:
            raise Killed()

    monkeypatch.setattr(RunDir, "append", append)
    yield state


def _sweep(cfg: sections.BenchConfig, run: RunDir) -> sweep.Sweep:
    return sweep.Sweep(cfg, run, None, lambda line: None, OWNER)  # type: ignore[arg-type]  # no host is read


def _configs() -> dict[str, sections.BenchConfig]:
    two = [{"name": "a"}, {"name": "b"}]
    load = {"percents": [50, 90], "capacity": 0}
    return {
        "grid": config.from_json({"instance": two, "load": load, "sweep": {
            "connections": "2,8,32", "iterations": 2, "until_ci": 0.001, "max_iterations": 3, "wait": 0,
            "warmup": 0}}),
        "adaptive": config.from_json({"instance": two, "load": {"percents": [], "capacity": 0}, "sweep": {
            "connections": "1,64", "search": "adaptive", "iterations": 2, "max_iterations": 3, "wait": 0,
            "warmup": 0}}),
    }


def _keys_written(path: Path) -> list[tuple[str, str, bool]]:
    """(kind, key, ok) of every whole record line, in order."""
    out = []
    for line in (path / RECORDS).read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("kind") in record_check.KEYED:
            out.append((r["kind"], r["key"], bool(r["ok"])))
    return out


def _check(path: Path, whole: set[tuple[str, str]], retried: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """No key after its success; nothing left out when read; every point of an uninterrupted run there
    (and those that failed there, if a resume tried them again)."""
    succeeded: set[tuple[str, str]] = set()
    for kind, key, ok in _keys_written(path):
        assert (kind, key) not in succeeded, f"{kind} {key} written again after its success"
        if ok:
            succeeded.add((kind, key))
    run = RunDir.open(path, strict=True)
    list(run.records())  # strict: a record left out would be an error
    assert whole <= succeeded and {key for _, key in succeeded - whole} <= retried


def _run(cfg: sections.BenchConfig, path: Path, state: dict[str, Any], kill_at: int | None = None,
         torn: bool = False) -> None:
    state.update(appends=0, kill_at=kill_at, torn=torn, failed=set())
    run = RunDir.create(path, {"kind": "bench", "config": cfg.to_json()})
    if kill_at is None:
        _sweep(cfg, run).execute()
        return
    with pytest.raises(Killed):
        _sweep(cfg, run).execute()
    state["kill_at"] = None
    _sweep(cfg, RunDir.open(path)).execute()  # --resume


@pytest.mark.parametrize("name", ["grid", "adaptive"])
def test_a_kill_after_any_append_then_resume_writes_no_key_twice(tmp_path: Path, fake_sweep: dict[str, Any],
                                                                 name: str) -> None:
    cfg = _configs()[name]
    fake_sweep["fails"] = {"a/8/0", "b/2/1", "a/@50%/0"}
    _run(cfg, tmp_path / "whole", fake_sweep)
    appends = fake_sweep["appends"]
    whole = {(k, key) for k, key, ok in _keys_written(tmp_path / "whole") if ok}
    assert appends > 12 and len(whole) > 8
    if name == "grid":  # the grid's iterations added (until_ci) and its open-loop load are in it
        assert ("measurement", "a/8/2") in whole and ("load", "b/@90%/1") in whole
    _check(tmp_path / "whole", whole)
    for k in range(1, appends + 1):
        for torn in (False, True):
            where = tmp_path / f"killed-{k}-{torn}"
            _run(cfg, where, fake_sweep, kill_at=k, torn=torn)
            _check(where, whole, fake_sweep["fails"])


def test_a_record_left_out_is_measured_again_on_resume(tmp_path: Path, fake_sweep: dict[str, Any]) -> None:
    """--resume does not count a left-out record as done: its point is measured again, and the file
    then reads whole, the new record counting and the damaged one still left out."""
    cfg = _configs()["grid"]
    _run(cfg, tmp_path / "r", fake_sweep)
    path = tmp_path / "r" / RECORDS
    lines = path.read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if '"key": "a/8/1"' in line)
    bad = json.loads(lines[n])
    bad["client"]["requests_per_s"] = float("nan")
    lines[n] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    run = RunDir.open(tmp_path / "r")
    assert "a/8/1" not in run.completed()
    fake_sweep.update(appends=0)
    _sweep(cfg, run).execute()
    assert fake_sweep["appends"] == 1  # a/8/1 alone
    again = RunDir.open(tmp_path / "r")
    assert "a/8/1" in again.completed()
    assert [why for _, why, _ in again.left_out] == [record_check.NUMBER]


def test_the_record_key_is_the_plans(tmp_path: Path) -> None:
    """record_check derives a point's key as plan.Point does."""
    for p in (plan.Point(3, 16, "x.y-1"), plan.Point(0, 128, "b", 90)):
        rec = {"kind": "load" if p.percent else "measurement", "instance": p.instance, "connections": p.connections,
               "iteration": p.iteration, **({"percent": p.percent} if p.percent else {})}
        assert record_check.point_key(rec) == p.key


