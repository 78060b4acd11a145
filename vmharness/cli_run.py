"""`vmharness run`: the whole experiment in guests, then its report."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from vmharness.cli_live import live_root
from vmharness.errors import HarnessError
from vmharness.host.root import HostRoot


def _say(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def _config(args: argparse.Namespace) -> Any:
    """The configuration file (or the embedded experiment), with --bdf and --hugepages on top."""
    from vmharness import config
    from vmharness.host.pci import parse_bdf

    cfg = config.load_run(Path(args.config) if args.config else None)
    guest = cfg.guest
    if args.bdf:
        guest = dataclasses.replace(guest, bdf=tuple(parse_bdf(b, "--bdf") for b in args.bdf))
    if args.hugepages:
        guest = dataclasses.replace(guest, hugepages=True)
    return config.validate(dataclasses.replace(cfg, guest=guest))


def _print_xml(cfg: Any, root: HostRoot) -> int:
    """What the run would define, read from `root` (the live host or a host root); nothing changes."""
    from vmharness.bench import bench
    from vmharness.guest import domain, instance, session
    from vmharness.host import journal

    owner = journal.RUN_PREFIX + bench.new_id()
    for inst in cfg.instance:
        planned = instance.plan(root, session.request(cfg, inst, owner), for_print=True)
        for note in planned.notes:
            print(f"note: {inst.name}: {note}", file=sys.stderr)
        print(f"<!-- instance {inst.name} -->")
        print(domain.to_xml(planned.spec), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from vmharness import config
    from vmharness.analysis import report, saturation
    from vmharness.bench.store import RunDir, check_new
    from vmharness.experiment import runner
    from vmharness.host import journal

    if args.resume and (args.config or args.out is not None or args.bdf or args.hugepages or args.print_xml):
        raise HarnessError("--resume takes the configuration from the run directory",
                           "drop CONFIG, --out, --bdf, --hugepages and --print-xml when resuming")
    if args.print_xml:
        return _print_xml(_config(args), HostRoot.open(args.host_root))
    root = live_root(args.host_root, "run", "drop --host-root (and VMHARNESS_HOST_ROOT), or add --print-xml to "
                     "see what the run would define")
    if args.resume:
        run = RunDir.open(Path(args.resume))
        if run.manifest.get("kind") != "run":
            raise HarnessError(f"{run.path} was written by `vmharness bench`", f"vmharness bench --resume {run.path}")
        cfg = config.validate(config.run_from_json(run.manifest["config"]))
    else:
        cfg = _config(args)
    out = Path(args.out) if args.out is not None else Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    if not args.resume:
        check_new(out, "--out")
    with journal.Lock(root):
        if not args.resume:
            run = runner.new_run(cfg, out)
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
