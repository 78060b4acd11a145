"""The load generators on one or more client machines at once: wrk (closed loop, the sweep) or oha (a
fixed rate, the open-loop load: vmharness/bench/openloop.py). Each client's generator waits behind
`read go`, and all of them are released together once every one has reported ready, so several clients
start loading the server within milliseconds of each other whatever their ssh set-up time. Connections
and a fixed rate are shared out between them alike, and their latency histograms are summed. A client
that has not finished `duration + timeout + margin` after the start is killed (its PID came with
`ready`; oha's pipeline is killed by that parent PID). A measured point also reads each of the
generator's threads' CPU at two instants inside its load (vmharness/bench/threads.py)."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vmharness import digits
from vmharness.bench import openloop, threads, wrk
from vmharness.bench.server import write_file
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.journal import files, journal
from vmharness.rundir import histogram
from vmharness.system import proc
from vmharness.system.machine import Machine
from vmharness.system.root import HostRoot

Load = wrk.WrkRun | openloop.OpenRun

# $1 $2: the thread reader's instants (threads.PROBE; "- -": none), then the generator's command. Open-file
# limit raised to the hard one (seed 004's `ulimit -n`); `ready PID` once the shell runs; wrk replaces it
# (same PID) after `go`.
GATE = f'ulimit -n "$(ulimit -Hn)" 2>/dev/null; echo "ready $$"; read go; {threads.PROBE}; exec "$@"'


@dataclass
class Client:
    machine: Machine
    threads: int | None = None  # None: min(connections, the client's CPUs)
    binary: str = "wrk"
    oha: str = openloop.DEFAULT
    cpus: int = 0
    script: str = ""
    seq: int = 0  # its journal record
    pin: tuple[int, ...] = ()  # the CPUs wrk may run on (taskset); empty: any

    def command(self, run: Load) -> list[str]:
        argv = run.argv(self.binary) if isinstance(run, wrk.WrkRun) else run.argv(self.oha)
        return ["taskset", "--cpu-list", ",".join(map(str, self.pin)), *argv] if self.pin else argv

    def prepare(self, root: HostRoot, owner: str, open_loop: bool = False) -> None:
        """Learn the CPU count and put report.lua on the machine (journaled for `owner`, removed by
        `done`); with an open-loop load to come, check that client.oha is oha."""
        res = self.machine.run(["nproc"], timeout=30, check=False)
        if proc.unreachable(res) is not None:
            raise res.failure("client ")
        if not res.ok:
            why = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise HarnessError(f"client {self.machine.label}: nproc failed ({res.how}): {why}",
                               "is it a Linux machine with coreutils?")
        self.cpus = len(self.pin) or digits.require(res.stdout.strip(), f"nproc on {self.machine.label}",
                                                    hint="is its login shell printing more than the command's output?")
        if open_loop:
            if self.machine.local:
                self.oha = openloop.local_binary(self.oha)
            try:
                said = self.machine.run([self.oha, "--version"], timeout=30, check=False)
                ok, what = said.ok and said.stdout.startswith("oha "), (said.stdout + said.stderr).strip()
            except HarnessError as exc:  # not there at all (on this machine)
                ok, what = False, exc.message
            if not ok:
                raise HarnessError(f"client.oha {self.oha!r} on {self.machine.label} is not oha: "
                                   f"{what[-120:] or 'no output'}",
                                   "install it (make test does, into .venv/bin), set client.oha to its path, "
                                   "or load.percents = [] to measure no open-loop load")
        script = files.wrk_script(owner.removeprefix(journal.RUN_PREFIX), os.getpid())
        self.seq = files.made(root, self.machine, script, owner)
        self.script = script
        write_file(self.machine, self.script, wrk.REPORT_LUA.read_text())

    def done(self, root: HostRoot) -> None:
        """Remove the script `prepare` put there."""
        if self.seq:
            files.remove(self.machine, self.script)
            journal.release(root, [self.seq])
            self.seq = 0


@dataclass
class ClientRun:
    client: Client
    run: Load
    stdout: str = ""
    stderr: str = ""
    result: dict[str, Any] | None = None
    error: str | None = None
    hung: bool = False
    pid: int = 0
    threads: dict[str, Any] | None = None  # its threads' CPU inside the load (threads.shares), if read
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)


def split(connections: int, clients: list[Client]) -> list[int]:
    """The point's connections shared out: even, the remainder to the first clients."""
    base, extra = divmod(connections, len(clients))
    return [base + (1 if i < extra else 0) for i in range(len(clients))]


def _read_ready(p: subprocess.Popen[bytes], deadline: float) -> int:
    assert p.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            raise HarnessError("a client did not get ready within the set-up time", "is it reachable over ssh?")
        chunk = os.read(p.stdout.fileno(), 1)
        if not chunk:
            err = p.stderr.read().decode(errors="replace").strip() if p.stderr else ""
            raise HarnessError(f"a client exited before starting its load generator: {err[-200:] or 'no output'}",
                               "check that the client is reachable and wrk (and oha) are installed there")
        line += chunk
    word, _, pid = line.decode().partition(" ")
    if word != "ready" or not is_digits(pid.strip()):
        raise HarnessError(f"a client said {line.decode().strip()!r} instead of ready", "is its shell sh-compatible?")
    return int(pid)


def wrk_runs(clients: list[Client], url: str, connections: int, duration: float, timeout: float,
             pipeline: int = 1) -> list[ClientRun]:
    """wrk on every client, the connections shared out."""
    out = []
    for client, conns in zip(clients, split(connections, clients), strict=True):
        threads = client.threads or wrk.default_threads(conns, client.cpus)
        out.append(ClientRun(client, wrk.WrkRun(url, conns, threads, duration, timeout, client.script, pipeline)))
    return out


def open_runs(clients: list[Client], url: str, connections: int, rate: float, duration: float,
              timeout: float) -> list[ClientRun]:
    """oha on every client, the connections and the rate (requests/s; 0: as fast as it can) shared out
    alike."""
    return [ClientRun(client, openloop.OpenRun(url, rate * conns / connections, conns, duration, timeout))
            for client, conns in zip(clients, split(connections, clients), strict=True)]


def run_together(runs: list[ClientRun], margin: float = 15.0, setup: float = 30.0, probe: bool = False,
                 on_go: Callable[[float], None] | None = None) -> tuple[list[ClientRun], float, float]:
    """Start every run's generator at once; returns the runs and the wall-clock start and end. With
    `probe`, each wrk's threads are read inside its load (ClientRun.threads; oha runs as a pipeline
    under a shell, whose own threads would say nothing); `on_go` is told the wall-clock start as the
    generators are released."""
    duration, timeout = max(r.run.duration_s for r in runs), max(r.run.timeout_s for r in runs)
    try:
        for r in runs:
            at = threads.gate_args(r.run.duration_s) if _probed(r, probe) else ["-", "-"]
            argv = r.client.machine.argv(["sh", "-c", GATE, "sh", *at, *r.client.command(r.run)])
            r.popen = proc.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 die_with_parent=True)
        ready_by = time.monotonic() + setup
        for r in runs:
            assert r.popen is not None
            r.pid = _read_ready(r.popen, ready_by)
        start = time.time()
        for r in runs:
            assert r.popen is not None and r.popen.stdin is not None
            r.popen.stdin.write(b"go\n")
            r.popen.stdin.close()
            r.popen.stdin = None  # so communicate() below does not flush it
        if on_go is not None:
            on_go(start)
        deadline = time.monotonic() + duration + timeout + margin
        for r in runs:
            _finish(r, deadline, _probed(r, probe))
        return runs, start, time.time()
    finally:
        for r in runs:
            if r.popen is not None and r.popen.poll() is None:
                _kill(r)


def _probed(r: ClientRun, probe: bool) -> bool:
    return probe and isinstance(r.run, wrk.WrkRun)


def _finish(r: ClientRun, deadline: float, probed: bool) -> None:
    """Wait for the generator's output (a generator that fails at once is waited for until its thread
    reader's second instant, which holds the pipe: at most its duration)."""
    assert r.popen is not None
    try:
        out, err = r.popen.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        r.hung = True
        _kill(r)
        out, err = r.popen.communicate(timeout=30)
    r.stdout = out.decode(errors="replace")
    r.stderr, readings = threads.split(err.decode(errors="replace"))
    if probed:
        r.threads = threads.shares(readings, r.pid, r.run.duration_s)
    if r.hung:
        r.error = f"{_name(r.run)} on {r.client.machine.label} did not finish in time: killed"
        return
    try:
        r.result = r.run.parse(r.stdout, r.stderr)
    except HarnessError as exc:
        r.error = f"{r.client.machine.label}: {exc.message}"


def _name(run: Load) -> str:
    return "wrk" if isinstance(run, wrk.WrkRun) else "oha"


def _kill(r: ClientRun) -> None:
    """The generator by the PID it reported (and, for oha's pipeline, that PID's children), then our
    side of the connection to it."""
    if r.pid:
        if isinstance(r.run, openloop.OpenRun):
            r.client.machine.run(["pkill", "-KILL", "-P", str(r.pid)], timeout=15, check=False)
        r.client.machine.run(["kill", "-KILL", str(r.pid)], timeout=15, check=False)
    if r.popen is not None:
        proc.stop(r.popen, grace=5)


def merge(runs: list[ClientRun]) -> dict[str, Any]:
    """One result for the point: requests, bytes and errors summed, and the clients' latency
    histograms summed into one (vmharness/rundir/histogram.py), from which its percentiles come. Each
    client's own result is kept in clients_detail, its histogram left in its raw output."""
    results = [r.result for r in runs if r.result is not None]
    if len(results) != len(runs):
        return {"ok": False, "errors": [r.error for r in runs if r.error]}
    latency, how = _latency([r["latency_us"] for r in results], _name(runs[0].run))
    merged: dict[str, Any] = {
        "ok": True,
        "clients": len(results),
        "requests": sum(r["requests"] for r in results),
        "bytes": sum(r["bytes"] for r in results),
        "requests_per_s": sum(r["requests_per_s"] for r in results),
        "duration_us_max": max(r["duration_us"] for r in results),
        "errors": {k: sum(r["errors"].get(k, 0) for r in results) for k in dict.fromkeys(
            key for r in results for key in r["errors"])},
        "latency_us": latency,
        "latency_merge": how,
    }
    if all("requested_per_s" in r for r in results):
        merged["requested_per_s"] = sum(r["requested_per_s"] for r in results)
        merged["unanswered"] = sum(r["unanswered"] for r in results)
    merged["clients_detail"] = [
        {"machine": r.client.machine.label, "connections": r.run.connections,
         **({"threads": r.run.threads} if isinstance(r.run, wrk.WrkRun) else {}),
         **{k: v for k, v in (r.result or {}).items() if k != "latency_us"},
         "latency_us": {k: v for k, v in (r.result or {}).get("latency_us", {}).items() if k != "histogram"},
         **({"threads_cpu": r.threads} if r.threads is not None else {})}
        for r in runs]
    return merged


def _latency(each: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], str]:
    """The point's latency from each client's, and how it was had."""
    if all(lat.get("histogram") is not None for lat in each):
        h = histogram.merge([histogram.Histogram.decode(lat["histogram"]) for lat in each])
        how = f"exact: {name}'s histogram" if len(each) == 1 else f"exact: {len(each)} clients' histograms summed"
        return {**h.summary(), "histogram": h.encode()}, how
    why = next(str(lat.get("no_histogram", "none kept")) for lat in each if lat.get("histogram") is None)
    if len(each) == 1:
        return each[0], f"wrk's own percentiles (no histogram: {why})"
    return {"percentiles": {}}, f"none: a client gave no histogram to merge ({why})"
