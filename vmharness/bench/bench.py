"""`vmharness bench`: a sweep against a server that is already a machine (bare metal, or anything
reachable over ssh) from a configuration, into a new run directory or continuing one (`--resume`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def execute(cfg: BenchConfig, run: RunDir, root: HostRoot, say: Say) -> dict[str, Any]:
    """Run the sweep (the caller holds the host lock: servers are journaled)."""
    with tuning.tuned(cfg, root, say) as tuned:
        run.update_manifest(tuning=tuned)
        tally = sweep.Sweep(cfg, run, root, say).execute()
    run.update_manifest(ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), tally=tally)
    return summary(run)


def summary(run: RunDir) -> dict[str, Any]:
    """Per instance and connection count: mean requests/s over the iterations that succeeded, errors,
    and the server machine's busy CPU share."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    failed = 0
    for r in run.records():
        if r.get("kind") != "measurement":
            continue
        if not r.get("ok"):
            failed += 1
            continue
        cells.setdefault((r["instance"], r["connections"]), []).append(r)
    server = run.manifest.get("machines", {}).get("server", {}).get("machine")
    rows = []
    for (inst, conns), recs in sorted(cells.items()):
        rps = [r["client"]["requests_per_s"] for r in recs]
        busy = [r["samples"].get(server, {}).get("cpu", {}).get("cpu", {}).get("busy") for r in recs]
        busy_known = [b for b in busy if b is not None]
        rows.append({
            "instance": inst, "connections": conns, "iterations": len(recs),
            "requests_per_s_mean": statistics.fmean(rps),
            "requests_per_s_stdev": statistics.stdev(rps) if len(rps) > 1 else 0.0,
            "errors": sum(r["client"]["errors"]["total"] for r in recs),
            "p99_us_mean": statistics.fmean(r["client"]["latency_us"]["percentiles"]["99"] for r in recs),
            "server_busy_percent": statistics.fmean(busy_known) if busy_known else None,
        })
    return {"run_dir": str(run.path), "rows": rows, "failed_points": failed}
