"""`vmharness run`: the whole experiment in guests, then its report."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.host.root import HostRoot


def _say(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def _config(args: argparse.Namespace) -> Any:
    """The configuration file (or the embedded experiment), with --bdf and --hugepages on top."""
    from vmharness import config

    cfg = config.load_run(Path(args.config) if args.config else None)
    guest = cfg.guest
    if args.bdf:
        guest = dataclasses.replace(guest, bdf=tuple(args.bdf))
    if args.hugepages:
        guest = dataclasses.replace(guest, hugepages=True)
    return config.validate(dataclasses.replace(cfg, guest=guest))


def _print_xml(cfg: Any) -> int:
    from vmharness.guest import domain, instance, session

    root = HostRoot.open(None)
    for inst in cfg.instance:
        planned = instance.plan(root, session.request(cfg, inst), for_print=True)
        for note in planned.notes:
            print(f"note: {inst.name}: {note}", file=sys.stderr)
        print(f"<!-- instance {inst.name} -->")
        print(domain.to_xml(planned.spec), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from vmharness import config
    from vmharness.analysis import report, saturation
    from vmharness.bench.store import RunDir
    from vmharness.experiment import runner
    from vmharness.host import journal

    if args.resume and (args.config or args.out or args.bdf or args.hugepages):
        raise HarnessError("--resume takes the configuration from the run directory",
                           "drop CONFIG, --out, --bdf and --hugepages when resuming")
    if args.resume:
        run = RunDir.open(Path(args.resume))
        if run.manifest.get("kind") != "run":
            raise HarnessError(f"{run.path} was written by `vmharness bench`", f"vmharness bench --resume {run.path}")
        cfg = config.validate(config.run_from_json(run.manifest["config"]))
    else:
        cfg = _config(args)
        if args.print_xml:
            return _print_xml(cfg)
    root = HostRoot.open(None)
    with journal.Lock(root):
        if not args.resume:
            run = runner.new_run(cfg, Path(args.out) if args.out else Path("runs") / time.strftime("run-%Y%m%d-%H%M%S"))
        _say(f"run directory: {run.path}")
        tally = runner.Runner(cfg, run, root, _say).execute(keep_host=args.keep_host)
    analysis = saturation.analyse(run)
    written = report.publish(analysis, run.path / "report", title=f"vmharness run: {run.path.name}")
    if args.json:
        print(json.dumps({"run_dir": str(run.path), **report.to_json(analysis)}, indent=2, sort_keys=True))
    else:
        print(report.text(analysis))
        print(f"\nrecords: {run.path}/records.jsonl; failed points: {tally['failed']}")
        print(f"report: {written[-1]} (and report.md, .csv, .json and the figures beside it)")
    return 1 if tally["failed"] or analysis.peak is None else 0


def register(subs: Any, add: Any) -> None:
    p = add(subs, "run", cmd_run,
            "the whole experiment: prepare the host, boot each instance's guest, tune, sweep wrk load over "
            "nginx in it, restore the host, report (no CONFIG: a small built-in experiment on this machine)",
            "vmharness run experiment.toml --bdf 0000:b3:00.0 --hugepages")
    p.add_argument("config", nargs="?", metavar="CONFIG",
                   help="TOML experiment (docs/run.md); default: mitigations=off vs auto in a small TCG-friendly sweep")
    p.add_argument("--bdf", action="append", default=[], help="pass this NIC through (repeatable; guest.bdf)")
    p.add_argument("--hugepages", action="store_true", help="guest memory on hugepages (guest.hugepages)")
    p.add_argument("--out", metavar="DIR", help="the new run directory (default runs/run-DATE-TIME)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run: measure only what is missing")
    p.add_argument("--keep-host", action="store_true",
                   help="leave what the run prepared (vfio-pci, hugepages) for the next run; host-restore undoes it")
    p.add_argument("--print-xml", action="store_true", help="print each instance's domain XML and stop")
