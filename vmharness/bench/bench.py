"""`vmharness bench`: a sweep against a server that is already a machine (bare metal, or anything
reachable over ssh) from a configuration, into a new run directory or continuing one (`--resume`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from vmharness import __version__, config, proc
from vmharness.bench import sweep, tuning
from vmharness.bench.store import RunDir
from vmharness.config import BenchConfig
from vmharness.host.root import HostRoot

Say = Callable[[str], None]
REPO = Path(__file__).resolve().parents[2]


def harness_version() -> dict[str, str]:
    rev = proc.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], timeout=10, check=False)
    dirty = proc.run(["git", "-C", str(REPO), "status", "--porcelain"], timeout=10, check=False)
    return {"version": __version__,
            "git": (rev.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")) if rev.ok else "unknown"}


def default_run_dir() -> Path:
    return Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S")


def new_run(cfg: BenchConfig, out: Path) -> RunDir:
    return RunDir.create(out, {"kind": "bench", "config": cfg.to_json(), "harness": harness_version(),
                               "machines": sweep.versions(cfg), "points_planned": len(sweep.points(cfg))})


def reopen(path: Path) -> tuple[BenchConfig, RunDir]:
    run = RunDir.open(path)
    return config.validate(config.from_json(run.manifest["config"])), run


def execute(cfg: BenchConfig, run: RunDir, root: HostRoot, say: Say) -> dict[str, int]:
    """Run the sweep (the caller holds the host lock: servers are journaled); returns the tally."""
    with tuning.tuned(cfg.tuning.profile, tuning.places(cfg, root), root, say) as tuned:
        run.update_manifest(tuning=tuned)
        tally = sweep.Sweep(cfg, run, root, say).execute()
    run.update_manifest(ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), tally=tally)
    return tally
