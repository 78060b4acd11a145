"""`vmharness report RUN_DIR`: the saturation point, the overhead there, and the warnings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def cmd_report(args: argparse.Namespace) -> int:
    from vmharness.analysis import report, saturation
    from vmharness.bench.store import RunDir

    run = RunDir.open(Path(args.run_dir))
    a = saturation.analyse(run, args.baseline)
    if args.out:
        written = report.publish(a, Path(args.out), title=f"vmharness report: {run.path.name}")
        print(f"wrote {len(written)} files to {args.out}: " + ", ".join(p.name for p in written))
        return 1 if a.peak is None else 0
    if args.json or args.format == "json":
        print(json.dumps(report.to_json(a), indent=2, sort_keys=True))
    elif args.format == "markdown":
        print(report.markdown(a), end="")
    elif args.format == "csv":
        print(report.to_csv(a), end="")
    else:
        print(report.text(a))
    return 1 if a.peak is None else 0


def register(subs: Any, add: Any) -> None:
    p = add(subs, "report", cmd_report,
            "the baseline's saturation point, the other instances' throughput and latency change there "
            "(95% t-intervals), and the reasons not to trust them", "vmharness report runs/loopback --format markdown")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by bench (or run)")
    p.add_argument("--format", default="text", choices=["text", "markdown", "csv", "json"])
    p.add_argument("--baseline", help="the instance to compare against (default: the first one)")
    p.add_argument("--out", metavar="DIR", help="write every form there: report.txt/.md/.csv/.json, throughput and "
                                               "latency plots (PNG, SVG) and report.html")
