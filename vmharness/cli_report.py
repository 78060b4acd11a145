"""`vmharness report RUN_DIR` and `vmharness compare RUN_DIR...`: the saturation point, the overhead
there, and the warnings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _show(a: Any, args: argparse.Namespace, title: str) -> int:
    from vmharness.analysis import report

    if args.out:
        written = report.publish(a, Path(args.out), title=title)
        print(f"wrote {len(written)} files to {args.out}: " + ", ".join(p.name for p in written))
    elif args.json or args.format == "json":
        print(json.dumps(report.to_json(a), indent=2, sort_keys=True))
    elif args.format == "markdown":
        print(report.markdown(a), end="")
    elif args.format == "csv":
        print(report.to_csv(a), end="")
    else:
        print(report.text(a))
    return 1 if a.peak is None else 0


def cmd_report(args: argparse.Namespace) -> int:
    from vmharness.analysis import saturation
    from vmharness.bench.store import RunDir

    run = RunDir.open(Path(args.run_dir))
    return _show(saturation.analyse(run, args.baseline), args, f"vmharness report: {run.path.name}")


def cmd_compare(args: argparse.Namespace) -> int:
    from vmharness.analysis import saturation
    from vmharness.bench.store import RunDir

    runs = [RunDir.open(Path(p)) for p in args.run_dirs]
    title = "vmharness compare: " + " vs ".join(r.path.name for r in runs)
    return _show(saturation.compare(runs, args.baseline), args, title)


def _options(p: argparse.ArgumentParser, baseline: str) -> None:
    p.add_argument("--format", default="text", choices=["text", "markdown", "csv", "json"])
    p.add_argument("--baseline", help=baseline)
    p.add_argument("--out", metavar="DIR", help="write every form there: report.txt/.md/.csv/.json, throughput and "
                                               "latency plots (PNG, SVG) and report.html")


def register(subs: Any, add: Any) -> None:
    p = add(subs, "report", cmd_report,
            "the baseline's saturation point, the other instances' throughput and latency change there "
            "(95% t-intervals), and the reasons not to trust them", "vmharness report runs/loopback --format markdown")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by bench (or run)")
    _options(p, "the instance to compare against (default: the first one)")
    p = add(subs, "compare", cmd_compare,
            "several runs as one report: every instance of every run against the first run's baseline, at its "
            "saturation point", "vmharness compare runs/kernel-6.1 runs/kernel-6.12 --out cmp/")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="run directories (named RUN/INSTANCE in the report)")
    _options(p, "RUN/INSTANCE to compare against (default: the first run's first instance)")
