"""`vmharness bench`: a sweep against a server machine, from a TOML configuration."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vmharness.bench import machines, server
from vmharness.cli.live import live_root
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.model import config
from vmharness.progress import say


def cmd_bench(args: argparse.Namespace) -> int:
    # Imported when the command runs: the analysis and the bench bring scipy.special (their import costs
    # about 200 ms of CPU), the run folder numpy (about 75 ms), the journal ops libvirt's bindings (about 60 ms).
    from vmharness.analysis import report, saturation
    from vmharness.bench import bench
    from vmharness.experiment import ops
    from vmharness.rundir.store import check_new

    root = live_root(args.host_root, "bench", "drop --host-root (and VMHARNESS_HOST_ROOT): bench measures this "
                     "machine and the ones its configuration names")
    if args.resume and (args.config or args.out is not None):
        raise HarnessError("--resume takes the configuration from the run directory",
                           "drop CONFIG and --out when resuming")
    out = Path(args.out) if args.out is not None else bench.default_run_dir()
    if args.resume:  # a damaged or foreign run directory is said before the lock, before anything is written
        cfg, _ = bench.reopen(Path(args.resume))
    else:
        cfg = config.load(Path(args.config) if args.config else None)
        check_new(out, "--out")
    server.check_configs(cfg.instance)
    machines.check_clients(cfg.client)
    with journal.Lock(root):
        if args.resume:
            cfg, run = bench.reopen(Path(args.resume))
        else:
            run = bench.new_run(cfg, out)
        say(f"run directory: {run.path}")
        ops.reclaim(root, say)
        tally = bench.execute(cfg, run, root, say)
    analysis = saturation.analyse(run)
    if args.json:
        print(json.dumps({"run_dir": str(run.path), **report.to_json(analysis)}, indent=2, sort_keys=True))
    else:
        print(report.text(analysis))
        print(f"\nrecords: {run.path}/records.jsonl; failed points: {tally['failed']}")
    return 1 if tally["failed"] else 0


def register(subs: Any, add: Any) -> None:
    p = add(subs, "bench", cmd_bench,
            "sweep wrk load over a server machine (bare metal or over ssh) and record every point",
            "vmharness bench bench.toml --out runs/nginx-bare")
    p.add_argument("config", nargs="?", metavar="CONFIG", help="TOML configuration (default: nginx and wrk here)")
    p.add_argument("--out", metavar="DIR", help="the new run directory (default runs/bench-DATE-TIME)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run: measure only what is missing")
