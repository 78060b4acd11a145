"""`vmharness bench`: a sweep against a server that is already a machine (bare metal, or anything
reachable over ssh) from a configuration, into a new run directory or continuing one (`--resume`).

Each run directory has an id (in its manifest, kept when resumed): what the run takes on any machine
is journaled with the owner `run:ID`, and its temporary folders and guests are named for it, so that
two runs never share one and a later run can give back exactly what a dead one left."""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from vmharness import __version__
from vmharness.bench import machines, plan, sweep, tuning
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.model import config, rules
from vmharness.model.sections import BenchConfig
from vmharness.progress import Say
from vmharness.rundir.store import RunDir
from vmharness.system import proc
from vmharness.system.root import HostRoot

CHECKOUT = Path(__file__).resolve().parents[2]  # the source tree, when the harness runs from one


def harness_version(checkout: Path = CHECKOUT) -> dict[str, str]:
    """The version, and the commit of the checkout the code runs from. An installed copy sits in
    site-packages, which is no checkout (git must not answer for a repository that merely contains
    it): its commit is "unknown"."""
    if not ((checkout / ".git").exists() and (checkout / "pyproject.toml").is_file()):
        return {"version": __version__, "git": "unknown"}
    try:
        rev = proc.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], timeout=10, check=False)
        dirty = proc.run(["git", "-C", str(checkout), "status", "--porcelain"], timeout=10, check=False)
    except HarnessError:  # git is not installed
        return {"version": __version__, "git": "unknown"}
    return {"version": __version__,
            "git": (rev.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")) if rev.ok else "unknown"}


def default_run_dir() -> Path:
    return Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S")


_ID = re.compile(r"[0-9a-f]{10}")


def new_id() -> str:
    """Ten hex digits: short enough for a guest's name (vmh-rID, a tap's 15 characters)."""
    return secrets.token_hex(5)


def owner(run: RunDir) -> str:
    """The run's journal owner, `run:ID`; a run directory from before ids were kept gets one now."""
    run_id = run.manifest.get("id")
    if run_id is None:
        run_id = new_id()
        run.update_manifest(id=run_id)
    if not isinstance(run_id, str) or not _ID.fullmatch(run_id):
        raise HarnessError(f"{run.path}/manifest.json: id {run_id!r} is not ten hex digits",
                           "the manifest was edited; start a new run")
    return journal.RUN_PREFIX + run_id


def new_run(cfg: BenchConfig, out: Path) -> RunDir:
    return RunDir.create(out, {"kind": "bench", "id": new_id(), "config": cfg.to_json(),
                               "harness": harness_version(), "machines": machines.versions(cfg),
                               "points_planned": plan.planned(cfg)})


def reopen(path: Path) -> tuple[BenchConfig, RunDir]:
    """A run directory `bench` wrote, checked to be resumed (store.RunDir.resume), and its configuration."""
    run = RunDir.resume(path, "bench")
    return rules.validate(config.from_json(run.manifest["config"])), run


def execute(cfg: BenchConfig, run: RunDir, root: HostRoot, say: Say) -> dict[str, int]:
    """Run the sweep (the caller holds the host lock: servers are journaled); returns the tally.
    Ctrl-C, SIGTERM or SIGHUP stop it with everything it took given back."""
    me = owner(run)
    with tuning.tuned(cfg.tuning.profile, tuning.places(cfg, root), root, say,
                                                me) as tuned:
        run.update_manifest(tuning=tuned)
        tally = sweep.Sweep(cfg, run, root, say, me).execute()
    run.update_manifest(ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), tally=tally)
    return tally
