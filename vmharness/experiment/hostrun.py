"""`vmharness run` with host boots: the engine (hostboots/engine.py) goes round the host boots, and in
each it runs the runner on the instances that name that host boot alone, for that round (its guest
boots rotate as in any run; a resumed run folder measures only what is missing). The runner gives back
all it took in that host boot (guests, tuning, the host's preparation) before the engine switches;
whatever of this run's is still outstanding then is given back too, or the switch is refused.

The same command goes on after each switch: `vmharness run --resume RUN_DIR`, run by the systemd unit
(hostboots/bootunit.py) where systemd runs, or by hand where it does not. Its consent is the state
file (/var/lib/vmharness/hostboots/state.json) of this run: the run that wrote it was started with
--allow-host-reboot. Its output goes to RUN_DIR/hostboots.log (`detach`), and from a terminal it
leaves it: a switch ends the SSH session the run came in on."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vmharness import progress, signals
from vmharness.bench import bench
from vmharness.bench import plan as bench_plan
from vmharness.bench.plan import Point
from vmharness.errors import HarnessError
from vmharness.experiment import runner
from vmharness.experiment.boots import rides
from vmharness.experiment.hostboots import arrival, bootunit, checks, engine, plan, target, unchanged
from vmharness.experiment.hostboots import kexec as kexec_mod
from vmharness.experiment.hostboots.state import Store
from vmharness.host.inspect import kernel_log
from vmharness.journal import restore
from vmharness.journal.kinds import OpKind
from vmharness.model.sections import RunConfig
from vmharness.rundir.store import RunDir
from vmharness.system import mounts
from vmharness.system.root import HostRoot

LOG = "hostboots.log"  # in the run folder: what the run says once it left the terminal


def consented(root: HostRoot, run_dir: Path) -> bool:
    """Whether the state file is this run folder's: its run was started with --allow-host-reboot."""
    st = Store(root.base).load()
    return st is not None and st.run == str(run_dir.resolve())


_EMPTIED = ("tmpfs", "ramfs")  # what a boot empties


def outlives_a_boot(root: HostRoot, folder: Path) -> None:
    """The run folder must be there after a boot: not on a tmpfs or ramfs (/proc/mounts' longest mount
    point above it)."""
    where = str(folder.resolve())
    best, kind = "", ""
    for point, fstype in mounts.table(root):
        point = point.rstrip("/") + "/"
        if (where + "/").startswith(point) and len(point) > len(best):
            best, kind = point, fstype
    if kind in _EMPTIED:
        raise HarnessError(f"the run folder {where[:200]} is on a {kind} ({best.rstrip('/') or '/'}), which a boot "
                           "empties: a run with host boots goes on there after each boot",
                           "give --out a folder on a disk (runs/ under your home, /var/lib/...)")


@dataclass(frozen=True)
class Prepared:
    program: str  # kexec's path
    targets: dict[str, target.Target] | None  # each host boot's files, checked (None: the state holds them)


def preflight(root: HostRoot, cfg: RunConfig, allowed: bool, folder: Path, resuming: bool,
              keep_host: bool) -> Prepared:
    """Before anything is taken: consent (said with what a reboot ends), kexec support, each host boot's
    files, a run folder that outlives a boot and that the unit can name. A resumed run whose state file
    is there had its consent and its files checked at its start (the engine checks each file's sha256
    again before it loads it)."""
    if keep_host:
        raise HarnessError("--keep-host: a run with host boots reboots the host, which forgets what was kept",
                           "drop --keep-host")
    resumed = resuming and consented(root, folder)
    checks.consent(allowed or resumed, checks.reboot_ends(root, checks.running_guests(root)), plan.switches(cfg))
    st = Store(root.base).load()
    if st is not None and st.run != str(folder.resolve()):
        raise HarnessError(f"another run's host boots are under way on this host ({st.run[:200]})",
                           f"vmharness run --resume {st.run[:200]}; or vmharness host-restore, then remove "
                           f"{Store(root.base).path}/state.json")
    program = checks.check_kexec(root)
    outlives_a_boot(root, folder)
    if bootunit.has_systemd(root):
        bootunit.text(folder.resolve(), Path.cwd(), sys.executable)  # each path one it can name
    return Prepared(program, None if resumed else target.all_of(root, cfg))


def points_of(cfg: RunConfig, stop: plan.Stop) -> Callable[[Point], bool]:
    """The points measured at `stop`: its instances' (and those riding in their guests), of its round;
    the last round's stops also take the later iterations a sweep adds."""
    riding, last = rides(cfg), cfg.sweep.iterations - 1

    def kept(p: Point) -> bool:
        return riding.get(p.instance, p.instance) in stop.instances and (
            p.iteration == stop.round or last == stop.round < p.iteration)
    return kept


def measure_with(cfg: RunConfig, run: RunDir, root: HostRoot, say: progress.Say,
                 tally: dict[str, int]) -> Callable[[plan.Stop], None]:
    """The runner, on one stop's points: prepares the host, measures, gives the host back."""
    def measure(stop: plan.Stop) -> None:
        seen = run.manifest.get("host_boots")
        visits = seen if isinstance(seen, list) else []
        # what the arrival check compared, and the kernel log's mitigation lines, kept for the reader
        now = {**arrival.facts(root), "mitigation_log": kernel_log.host_mitigation_lines(root)}
        dropped = unchanged.why(cfg, visits, stop, now)
        if dropped is None:
            say(f"{stop.label}: measuring {', '.join(stop.instances)} in {target.running_release(root)}")
            got = runner.Runner(cfg, run, root, say, keep=points_of(cfg, stop)).execute(keep_host=False)
            for k in tally:
                tally[k] += got[k]
        gone = bench_plan.dropped(run.records())  # a stop resumed after a kill may have dropped it already
        for name in [n for n in stop.instances if n not in gone] if dropped else ():
            say(f"{stop.label}: {name} dropped before it is measured: {dropped}")
            run.append({"kind": "dropped", "instance": name, "iteration": stop.round, "reason": dropped})
        run.update_manifest(host_boots=[*visits, {
            "round": stop.round, "boot": stop.boot, "instances": list(stop.instances), "dropped": dropped is not None,
            "release": target.running_release(root), "cmdline": target.running_cmdline(root),
            "boot_id": now.get("boot_id"), "mitigation_log": now["mitigation_log"],
            **{k: now.get(k) for k in arrival.SAME_ON_EVERY_VISIT}}])
    return measure


def dropped_stop(run: RunDir) -> Callable[[plan.Stop], bool]:
    """Whether a stop has nothing left to measure: every instance of it dropped (a host switch that
    changes nothing here: unchanged.py), so the engine need not boot it."""
    def skip(stop: plan.Stop) -> bool:
        return bool(stop.instances) and set(stop.instances) <= bench_plan.dropped(run.records())
    return skip


def go(root: HostRoot, cfg: RunConfig, run: RunDir, say: progress.Say, kexec: kexec_mod.Kexec, ready: Prepared,
       measure: Callable[[plan.Stop], None]) -> engine.Outcome:
    """Install (or journal again) the unit that resumes the run, then step the engine; at the end the
    unit goes, and when the run stops (an error, a signal) too: only a switch leaves it, for the next
    boot. With the real kexec a switch does not return."""
    owner = bench.owner(run)
    here = run.path.resolve()
    if finished(run):
        say("the run's host boots were all gone round and it came home: no host boot is measured again "
            "(a new run measures what failed)")
        return "done"
    if bootunit.has_systemd(root):
        bootunit.install(root, here, Path.cwd())
    else:
        say(f"no systemd on this host: after each switch, run: vmharness run --resume {here}")

    def give_back() -> None:
        problems = restore.undo(root, say, only=lambda rec: rec.get("owner") == owner)
        if problems:
            raise HarnessError(f"could not give back what the run took before switching the host: {problems[0]}",
                               "vmharness host-restore shows and retries it; then vmharness run --resume")

    def targets() -> dict[str, target.Target]:
        if ready.targets is None:
            raise HarnessError(f"{Store(root.base).path}: the run's state went away while it was read",
                               "start the run again")
        return ready.targets

    eng = engine.Engine(root, Store(root.base), kexec, ready.program, plan.stops(cfg), targets, measure,
                        give_back, owner, say, dropped_stop(run))
    try:
        outcome = eng.step(str(here))
    except BaseException:  # an error, a signal: the next boot must not start the run again by itself
        _unit_gone(root, say)
        say(f"the run stopped; its state is kept: vmharness run --resume {here} goes on from where it was, "
            "vmharness host-restore gives the host back")
        raise
    if outcome == "done":
        run.update_manifest(host_boots_done=True)
        _unit_gone(root, say)
    return outcome


def finished(run: RunDir) -> bool:
    """Whether the run's host boots were all gone round (its manifest says so, written when the engine
    came home): a `--resume` then reports, and switches the host no more."""
    return run.manifest.get("host_boots_done") is True


def _unit_gone(root: HostRoot, say: progress.Say) -> None:
    for p in restore.undo(root, say, only=lambda rec: rec["op"] == OpKind.BOOT_UNIT):
        say(f"NOT RESTORED: {p}")


def detach(root: HostRoot, run: RunDir) -> None:
    """What the run says from here on goes to RUN_DIR/hostboots.log, the one place to follow it (the
    systemd unit's runs write there too). From a terminal the run also leaves it: it goes on in a
    process of a session of its own (double fork), since a switch ends the session it came in on."""
    log = run.path / LOG
    print(f"the run reboots the host between its host boots; follow it: tail -F {log}", flush=True)
    if not bootunit.has_systemd(root):
        print(f"no systemd on this host: after each boot, run: vmharness run --resume {run.path.resolve()}",
              flush=True)
    sys.stderr.flush()
    if sys.stdin.isatty() or sys.stdout.isatty():
        if os.fork():
            os._exit(0)
        os.setsid()
        if os.fork():
            os._exit(0)
        signals.forked()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    with run.folder.append(LOG) as fd:  # a regular file in the run's own folder, never through a link
        os.dup2(fd, 1)
        os.dup2(fd, 2)
