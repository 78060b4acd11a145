"""A sweep: every (iteration, connections, instance) point measured with wrk on all clients at once,
the instances interleaved so that drift over time is shared out instead of landing on one of them,
samplers running on every machine, and each point written to the run directory as soon as it is
measured. A point that fails is retried, then recorded as failed, and the sweep goes on. Then the
open-loop load (docs/load.md): each instance at load.percents of the baseline's peak, from oha; and
before all, what each client can generate against a trivial nginx on itself (`capacity` records)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vmharness import progress
from vmharness.bench import at_peak, capacity, explained, hostview, plan, server
from vmharness.bench import clients as clients_mod
from vmharness.bench.machines import machine
from vmharness.bench.plan import Point
from vmharness.bench.sampler import Samplers
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.model import derived
from vmharness.model.sections import BenchConfig, InstanceSection, RunConfig
from vmharness.rundir import record_check
from vmharness.rundir.store import RunDir
from vmharness.signals import shielded
from vmharness.system.machine import Machine
from vmharness.system.root import HostRoot


def rest(wait: float, end: Any, now: float) -> float:
    """What is left of sweep.wait from a load's end (wall clock; None: no attempt ended) to the next start."""
    return max(0.0, wait - (now - end if isinstance(end, float) else 0.0))


def _began(vcpus: hostview.VcpuReader, samplers: Samplers) -> Callable[[float], None]:
    """What starts as a load begins: the vCPUs' reader, and a snapshot on every machine (its window's first)."""
    def go(at: float) -> None:
        vcpus.begin(at)
        samplers.wake()
    return go


@dataclass
class Sweep:
    cfg: BenchConfig
    run: RunDir
    root: HostRoot
    say: progress.Say
    owner: str  # the run's journal owner (run:ID): its servers and files carry it
    server_machine: Machine = field(init=False)
    clients: list[clients_mod.Client] = field(init=False)
    server_on: Machine | None = None  # the server's machine, if not cfg.server.host (a guest)
    local_cpus: tuple[int, ...] = ()  # the CPUs wrk may use on this machine (a run keeps it off the
    # guest's vCPUs); empty: any
    vcpu_probe: hostview.Probe | None = None  # a run's guest: its vCPU threads' CPU seconds
    qemu_threads: hostview.Threads | None = None  # and the seconds they waited for a host CPU, QEMU's own CPU
    kvm_counters: hostview.Counters | None = None  # a run's guest under KVM: its VM exits by kind
    host_on: Machine | None = None  # a run's: the machine that runs the guest, sampled too
    host_devices: tuple[str, ...] = ()  # a run's: the NICs passed through to the guest (BDFs)
    before_point: Callable[[Point], None] | None = None  # a run's: set the guest up for the point's instance
    as_booted: Callable[[], None] | None = None  # a run's: the guest as it booted again (a rider's cap lifted)
    shares: dict[str, str] = field(default_factory=dict)  # a run's riders: the instance whose server each
    # one is served by, as it is (experiment/boots.rides: the same guest and nginx), never restarted for it
    idle_of: dict[str, Any] | None = None  # a run's baseline session ({"instance", "iteration"}) whose
    # guest's vCPU time without load is measured first (the positive control's expectation)
    current: server.Server | None = None
    serving: str | None = None  # the instance `current` serves
    warmed: bool = False
    target: dict[str, Any] | None = None  # the run's load_target record, once read

    def __post_init__(self) -> None:
        self.server_machine = self.server_on or machine(self.cfg.server.host)
        self.clients = [clients_mod.Client(m, c.threads or None, c.wrk, c.oha, pin=self.local_cpus if m.local else ())
                        for c in self.cfg.client for m in (machine(c.host),)]

    def _server_config(self, inst: InstanceSection) -> server.ServerConfig:
        s = self.cfg.server
        return server.ServerConfig(binary=inst.nginx, config=inst.config or None, workers=s.workers or None,
                                   worker_connections=s.worker_connections, filesize=s.filesize, mode=s.mode,
                                   listen=s.listen,
                                   prefix=server.prefix_for(self.owner.removeprefix(journal.RUN_PREFIX), inst.name))

    def _serve(self, name: str, restart: bool) -> server.Server:
        """The server of instance `name` (exactly that one, or the one it rides on), started unless it
        already runs."""
        name = self.shares.get(name, name)
        if self.current is not None and self.serving == name and not restart:
            return self.current
        self.stop_server()
        inst = next(i for i in self.cfg.instance if i.name == name)
        srv = server.Server(self.server_machine, self._server_config(inst), self.owner)
        srv.start(self.root)
        self.current, self.serving, self.warmed = srv, name, False  # a fresh server: warmed before its points
        server.check(self.clients[0].machine, self.cfg.server.url, srv.cfg.expected_length())
        return srv

    def stop_server(self) -> None:
        if self.current is not None:
            self.current.stop(self.root)
            self.current, self.serving = None, None

    def _runs(self, point: Point, seconds: float | None = None) -> list[clients_mod.ClientRun]:
        s, url = self.cfg.sweep, self.cfg.server.url
        if not point.percent:
            depth = next(i.pipeline for i in self.cfg.instance if i.name == point.instance)
            explains = point.counted or point.profiled
            seconds = seconds or (self.cfg.explain.duration if explains and isinstance(self.cfg, RunConfig)
                                  else s.duration)
            return clients_mod.wrk_runs(self.clients, url, point.connections, seconds, s.timeout, depth)
        return clients_mod.open_runs(self.clients, url, point.connections, self._rate(point.percent),
                                     self.cfg.load.duration or s.duration, s.timeout)

    def _rate(self, percent: int) -> float:
        """The open-loop rate at `percent` of the target (load_points offers none before it is written)."""
        if self.target is None:
            self.target = record_check.load_target(self.run.records())
        try:
            assert self.target is not None
            return float(self.target["rates"][str(percent)])
        except (KeyError, TypeError, ValueError) as exc:
            raise HarnessError(f"the run's load_target has no rate for {percent}%",
                               "load.percents changed since the run began: resume with the configuration "
                               "it began with") from exc

    def measure(self, samplers: Samplers, point: Point, srv: server.Server,
                seconds: float | None = None) -> dict[str, Any]:
        """One point (its load `seconds` long, if given), retried as configured. Every machine's figures
        cover what the generator measured: from the release for wrk's own duration (its start-up is part
        of that; its done() hook and the ssh teardown after are not), `measured_end` in the record; the
        host's vCPU threads and the client's generator threads are read at two instants inside it."""
        s = self.cfg.sweep
        attempts: list[dict[str, Any]] = []
        for attempt in range(1, s.retries + 2):
            since = samplers.offsets()
            loads = self._runs(point, seconds)
            vcpus = hostview.VcpuReader(self.vcpu_probe, max(r.run.duration_s for r in loads), self.kvm_counters,
                                        self.qemu_threads)
            first = samplers.woken + 1
            runs, start, end = clients_mod.run_together(loads, s.margin, probe=True, on_go=_began(vcpus, samplers))
            samplers.wake()  # the snapshot after the load, which its window ends with, now
            wakes = (first, samplers.woken)
            host = vcpus.result()
            merged = clients_mod.merge(runs)
            raw = [{"machine": r.client.machine.label, "argv": r.client.command(r.run), "stdout": r.stdout,
                    "stderr": r.stderr[-2000:], "hung": r.hung} for r in runs]
            attempts.append({"attempt": attempt, "start": start, "end": end, "client": merged, "raw": raw})
            if merged["ok"]:
                measured_end = start + merged["duration_us_max"] / 1e6
                roots = {self.server_machine.key: {srv.pid}}
                samples = samplers.summaries(since, start, measured_end, roots, wakes)
                if self.host_on is not None:
                    host.update(hostview.vfio(samples.get(self.host_on.key, {}), self.host_devices))
                return {"ok": True, "attempts": len(attempts), "start": start, "end": end,
                        "measured_end": round(measured_end, 6), "client": merged, "raw": raw, "samples": samples,
                        "failed_attempts": attempts[:-1], **({"host": host} if host else {})}
            self.say(f"    attempt {attempt} failed: {'; '.join(merged['errors'])}")
            time.sleep(s.wait)
        return {"ok": False, "attempts": len(attempts), "failed_attempts": attempts}

    def _idle(self, samplers: Samplers) -> None:
        """The guest's vCPU time and kernel events with no load (hostview.idle), recorded as its boot's."""
        if self.idle_of is not None and self.vcpu_probe is not None and \
                (got := hostview.idle(self.vcpu_probe, samplers, self.server_machine.key)):
            self.run.append({"kind": "idle", **self.idle_of, **got})
            self.say(f"the guest's vCPUs without load: {', '.join(f'{b:.1f}%' for b in got['vcpu_busy_percent'])} "
                     f"busy over {got['window_s']:.1f} s")

    def _warm_up(self, samplers: Samplers) -> None:
        s = self.cfg.sweep
        if self.warmed or s.warmup <= 0:
            return
        runs, start, end = clients_mod.run_together(
            clients_mod.wrk_runs(self.clients, self.cfg.server.url, self.cfg.counts[0], s.warmup, s.timeout), s.margin)
        self.run.append({"kind": "warmup", "start": start, "end": end, "client": clients_mod.merge(runs)})
        self.warmed = True

    def _one(self, samplers: Samplers, point: Point, label: str) -> bool:
        if self.before_point is not None and not (point.counted or point.profiled):
            self.before_point(point)
        srv = self._serve(point.instance, self.cfg.sweep.restart_server_between_runs)
        self._warm_up(samplers)
        where = {"key": point.key, "instance": point.instance, "connections": point.connections,
                 "iteration": point.iteration, **({"repeat": point.repeat} if point.repeat else {})}
        if point.counted or point.profiled:
            extra = explained.profiled if point.profiled else explained.counted
            return extra(self, samplers, point, srv, where, label)
        result = self.measure(samplers, point, srv)
        if point.percent:
            rate = self._rate(point.percent)
            self.run.append({"kind": "load", **where, "percent": point.percent, "rate": rate, **result})
            got = result["client"] if result["ok"] else None
            said = (f"{got['requests_per_s']:,.0f} req/s, p99 {got['latency_us']['percentiles'].get('99', '-')} us"
                    if got else "FAILED")
            self.say(f"{label} {point.instance} at {point.percent}% of the peak ({rate:,.0f} req/s) "
                     f"it={point.iteration}: {said}")
            self.drain(srv)
        else:
            self.run.append({"kind": "measurement", **where, **result})
            rps = f"{result['client']['requests_per_s']:,.0f} req/s" if result["ok"] else "FAILED"
            self.say(f"{label} {point.instance} c={point.connections} it={point.iteration}: {rps}")
        self.pause(result)
        return bool(result["ok"])

    def drain(self, srv: server.Server) -> None:
        """The server left to answer what the last load sent it (Server.drain), or said why not."""
        s = self.cfg.sweep
        if why := srv.drain(srv.port(self.cfg.server.url), s.timeout + s.margin):
            self.say(f"    {why}")

    def pause(self, result: dict[str, Any]) -> None:
        """sweep.wait from the point's load's end to the next point's start."""
        time.sleep(rest(self.cfg.sweep.wait, result.get("end"), time.time()))

    def _next(self, only: list[Point] | None, more: Callable[[], list[Point]] | None) -> list[Point]:
        if only is not None:
            return more() if more is not None else []
        if self.cfg.sweep.variants == "peak":  # the round that ends the baseline's first iteration fixes it
            self._fix_target()
        todo, why = plan.after_round(self.cfg, self.run.records())
        if why:
            self.say(why)
        return todo

    def _fix_target(self) -> bool:
        """The baseline's peak written once, if it is not yet (at_peak.new_target); False when there is
        none to write."""
        records = list(self.run.records())
        if record_check.load_target(records) is not None:
            return True
        target = at_peak.new_target(self.cfg, records)
        if target is None:
            self.say("no point at the baseline's peak yet: the baseline has no successful point to take it from")
            return False
        self.run.append(target)
        what = [f"open-loop load at {', '.join(map(str, self.cfg.load.percents))}% of it"] if self.cfg.load.percents \
            else []
        what += ["the others measured there"] if self.cfg.sweep.variants == "peak" else []
        self.say(f"the baseline's peak: {target['connections']} connections, {target['requests_per_s']:,.0f} req/s "
                 f"({target['from']}){': ' + ' and '.join(what) if what else ''}")
        return True

    def _loads(self, only: list[Point] | None, loads: Callable[[], list[Point]] | None) -> list[Point]:
        """The points at the baseline's peak (at_peak.after_sweep), once the sweep is done (or, given
        `only`, what `loads` offers: a run's session asks for its iteration's); the peak is fixed first
        if it is not yet."""
        if not (self.cfg.load.percents or derived.explains(self.cfg) or self.cfg.sweep.variants == "peak") \
                or not self._fix_target():
            return []
        if only is None:
            return at_peak.after_sweep(self.cfg, self.run.records())
        return loads() if loads is not None else []

    def execute(self, only: list[Point] | None = None, more: Callable[[], list[Point]] | None = None,
                loads: Callable[[], list[Point]] | None = None) -> dict[str, int]:
        """Measure every point not yet in the run directory (or just `only`, as given, then whatever
        `more` offers after each round: a run's guest session asks the adaptive search), then the
        open-loop load (`loads`: a session's); returns counts of ok and failed points. What a dead run
        left is reclaimed before (experiment.reclaim)."""
        if only is None:
            done = self.run.completed()
            todo = plan.todo(self.cfg, self.run.records(), done)
            self.say(f"{len(todo)} points to measure ({len(done)} already in {self.run.path})")
        else:
            todo = list(only)
        samplers = Samplers(self.run, self.cfg.samplers.interval)
        tally = {"ok": 0, "failed": 0}
        try:
            for c in self.clients:
                c.prepare(self.root, self.owner, open_loop=bool(self.cfg.load.percents))
            capacity.measure(self.clients, self.cfg, self.run, self.root, self.owner, self.say)
            samplers.start([self.server_machine, *(c.machine for c in self.clients),
                            *([self.host_on] if self.host_on is not None else [])])
            self._idle(samplers)
            loading = False
            with progress.Progress("points measured", len(todo)) as bar:
                while todo:
                    for n, point in enumerate(todo, 1):
                        tally["ok" if self._one(samplers, point, f"[{n}/{len(todo)}]") else "failed"] += 1
                        bar.advance()
                    todo = [] if loading else self._next(only, more)
                    if not todo and not loading:
                        todo, loading = self._loads(only, loads), True
                    if todo:
                        bar.grow(len(todo))
        finally:
            with shielded():
                self.stop_server()
                samplers.stop()
                for c in self.clients:
                    c.done(self.root)
        return tally
