"""The points that explain a cost, one per instance (and boot, for the system calls) at the baseline's
peak, each with an instrument on that the sweep's own points never have: the server's system calls
counted (bench/syscalls.py, `[explain] syscalls`) or its CPUs profiled (bench/profile.py, `[explain]
profile`). Their records are of their own kind, so that no statistic of the sweep ever mixes them in;
the report sets their throughput beside the uninstrumented one (the instrument's cost)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from vmharness import progress
from vmharness.bench import openloop, profile, server, syscalls
from vmharness.bench.plan import Point
from vmharness.bench.sampler import Samplers
from vmharness.errors import HarnessError
from vmharness.rundir.store import RunDir
from vmharness.system.machine import Machine


class Sweep(Protocol):
    """What of a sweep (bench/sweep.py) these points use."""

    server_machine: Machine
    run: RunDir
    before_point: Callable[[Point], None] | None  # a run's: the guest set up for the point's instance
    as_booted: Callable[[], None] | None  # a run's: the guest as it booted again

    @property
    def say(self) -> progress.Say: ...

    def measure(self, samplers: Samplers, point: Point, srv: server.Server,
                seconds: float | None = None) -> dict[str, Any]: ...

    def drain(self, srv: server.Server) -> None: ...

    def pause(self, result: dict[str, Any]) -> None: ...

SHORTER = 1.0  # seconds: the load a counted point's own is set against (wrk's shortest)
COLLAPSE = "inferno-collapse-perf"  # `make inferno` installs it beside this Python, as oha


def counted(sw: Sweep, samplers: Samplers, point: Point, srv: server.Server, where: dict[str, Any],
            label: str) -> bool:
    """A point whose server's system calls are counted: the trigger on around two loads at its count,
    one of SHORTER seconds and then its own, the server left to answer each before the histogram is
    read (bench/syscalls.py says why). The calls of nginx's processes (its master and their
    descendants) in its own load are kept by system call, and those of the shorter load with its
    requests (`shorter`)."""
    m = sw.server_machine
    try:
        syscalls.start(m)
    except HarnessError as exc:  # a kernel that cannot count: this point fails, the session goes on
        return _failed(sw, "syscalls", where, label, "counted", exc.message)
    try:
        with _loading(sw, point):
            shorter = sw.measure(samplers, point, srv, SHORTER)
            sw.drain(srv)
            before = syscalls.read(m) if shorter["ok"] else syscalls.Counts({}, 0, 0)
            result = sw.measure(samplers, point, srv) if shorter["ok"] else shorter
            sw.drain(srv)
        counts, stats = syscalls.stop(m)
    except HarnessError as exc:
        _quietly_stop(m)
        return _failed(sw, "syscalls", where, label, "counted", exc.message)
    except BaseException:
        _quietly_stop(m)
        raise
    if result["ok"] and result["attempts"] + shorter["attempts"] > 2:  # a failed attempt's calls are in the count
        result = {**result, "ok": False, "error": "counted over more than one attempt: not a count per request"}
    nginx = syscalls.tree(stats, srv.pid)
    mine = syscalls.between(before, counts)
    by_call, fewer = syscalls.of(mine, nginx), syscalls.of(before, nginx)
    got = result["client"] if result["ok"] else None
    record = {"kind": "syscalls", **where, **result, "syscalls": {
        "server": sum(by_call.values()), "by_call": by_call, "all": mine.hits, "dropped": mine.dropped},
        **({"shorter": {"seconds": SHORTER, "requests": shorter["client"]["requests"], "server": sum(fewer.values()),
                        "by_call": fewer, "all": before.hits, "dropped": before.dropped}} if got else {})}
    sw.run.append(record)
    per = (syscalls.per_request(record) or (math.nan, {}))[0] if got else math.nan
    said = f"{got['requests_per_s']:,.0f} req/s, {per:.2f} system calls per request in the server" if got else "FAILED"
    sw.say(f"{label} {point.instance} c={point.connections} it={point.iteration}, counted: {said}")
    sw.pause(result)
    return bool(result["ok"])


def profiled(sw: Sweep, samplers: Samplers, point: Point, srv: server.Server, where: dict[str, Any],
             label: str) -> bool:
    """A point during which the server's CPUs are profiled: its folded stacks kept in the run folder's
    profiles/, named in the record with their digest and size."""
    try:
        result, folded = profile.take(sw.server_machine, lambda: _loaded(sw, point, lambda: sw.measure(
            samplers, point, srv)), openloop.local_binary(COLLAPSE))
    except HarnessError as exc:  # no perf in the guest, or it did not answer: this point fails, the session goes on
        return _failed(sw, "profile", where, label, "profiled", exc.message)
    kept: dict[str, Any] = {}
    if folded is not None:
        name = f"{point.instance}-{point.iteration}.folded"
        sw.run.folder.folder("profiles").write(name, folded.encode())
        kept = {"profile": {"file": f"profiles/{name}", "sha256": profile.digest(folded),
                            "bytes": len(folded.encode()), "frequency": profile.FREQUENCY}}
    sw.run.append({"kind": "profile", **where, **result, **kept})
    got = result["client"] if result["ok"] else None
    said = f"{got['requests_per_s']:,.0f} req/s, stacks kept in {kept['profile']['file']}" if got else "FAILED"
    sw.say(f"{label} {point.instance} c={point.connections} it={point.iteration}, profiled: {said}")
    sw.pause(result)
    return bool(result["ok"])


@contextlib.contextmanager
def _loading(sw: Sweep, point: Point) -> Iterator[None]:
    """The guest set up for the point's instance during its loads, as it booted after: what an
    explaining point does around them (perf's start and script, the histogram's trigger) runs at the
    booted guest's speed, not at a riding control's capped one."""
    if sw.before_point is not None:
        sw.before_point(point)
    try:
        yield
    finally:
        if sw.as_booted is not None:
            sw.as_booted()


def _loaded(sw: Sweep, point: Point, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    with _loading(sw, point):
        return measure()


def _quietly_stop(m: Machine) -> None:
    with contextlib.suppress(HarnessError):  # the point's own error is the one to say
        syscalls.stop(m)


def _failed(sw: Sweep, kind: str, where: dict[str, Any], label: str, done: str, error: str) -> bool:
    sw.run.append({"kind": kind, **where, "ok": False, "attempts": 0, "error": error, "failed_attempts": []})
    sw.say(f"{label} {where['instance']} c={where['connections']} it={where['iteration']}, {done}: FAILED: {error}")
    return False

