"""`vmharness report RUN_DIR` and `vmharness compare RUN_DIR...`: the saturation point, the overhead
there, and the warnings."""

from __future__ import annotations

import argparse
import shlex
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vmharness.errors import HarnessError
from vmharness.textsafe import json_text
from vmharness.textsafe import line as one_line

if TYPE_CHECKING:
    from vmharness.rundir.store import RunDir

# The analysis is imported when a command runs: it brings scipy.special (about 200 ms of CPU to import)
# and the run folder numpy (about 75 ms), which the other commands and `--help` do not need; matplotlib
# (about 300 ms more) only --out, which draws figures (publish.py).


def _out(args: argparse.Namespace) -> Path | None:
    """--out: a folder to (create and) fill, refused before any work when something other than a
    folder is there, when it holds something other than files and folders (a FIFO would block a write
    forever), or when it is not a report's folder (vmharness/analysis/publish.py) unless --force."""
    from vmharness.analysis import publish  # scipy: see the note at the top

    value = args.out
    if value is None:
        if args.force:
            raise HarnessError("--force goes with --out", "drop --force, or add --out DIR")
        return None
    hint = publish.HINT
    if not value.strip():
        raise HarnessError("--out is empty", hint)
    out = Path(value)
    if out.is_dir() and not out.is_symlink():
        for entry in out.iterdir():
            mode = entry.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise HarnessError(f"--out {value}: it holds {entry.name}, which is not a regular file", hint)
    publish.preflight(out, "--out", args.force)
    return out


def _instances(run: RunDir) -> list[str]:
    """The instances a run measured: its configuration's, else those its records name."""
    names = [i["name"] for i in run.manifest.get("config", {}).get("instance", [])]
    return names or sorted({r["instance"] for r in run.records() if isinstance(r.get("instance"), str)})


def _baseline(value: str | None, known: list[str]) -> str | None:
    if value is None:
        return None
    if value not in known:
        raise HarnessError(f"--baseline {value!r} is not an instance of this report",
                           f"choose one of: {one_line(', '.join(known)) or '(none: nothing was measured)'}")
    return value


def _where(args: argparse.Namespace) -> list[str]:
    """Where the rest of the answer is, after the terminal's short form: the full text, and every form
    (a run's own report folder, else --out)."""
    again = shlex.join(["vmharness", args.command_name, *args.run_dirs])
    out = [f"the full text: {again} --full"]
    folders = [p for p in (Path(r) / "report" for r in args.run_dirs) if p.is_dir() and not p.is_symlink()]
    return out + ([f"every form (HTML, Markdown, CSV, JSON, figures): {', '.join(map(str, folders))}"] if folders else
                  [f"every form (HTML, Markdown, CSV, JSON, figures): {again} --out DIR"])


def _show(a: Any, args: argparse.Namespace, title: str) -> int:
    from vmharness.analysis import markdown, publish, report  # scipy: see the note at the top

    out = _out(args)
    if out is not None:
        written = publish.publish(a, out, title=title, force=args.force)
        print(one_line(f"wrote {len(written)} files to {args.out}: " + ", ".join(p.name for p in written)))
    elif args.json or args.format == "json":
        print(json_text(report.to_json(a)))
    elif args.format == "markdown":
        print(markdown.render(a), end="")
    elif args.format == "latex":
        from vmharness.analysis import latex, summary

        print(latex.render(summary.build(a)), end="")
    elif args.format == "csv":
        print(report.to_csv(a), end="")
    elif args.full:
        print(report.text(a))
    else:
        print(report.short(a, _where(args)))
    return 1 if a.peak is None else 0


def cmd_report(args: argparse.Namespace) -> int:
    from vmharness.analysis import saturation  # scipy, numpy: see the note at the top
    from vmharness.rundir.store import RunDir

    _out(args)  # refused before any work
    args.command_name, args.run_dirs = "report", [args.run_dir]
    run = RunDir.open(Path(args.run_dir), strict=args.strict)
    baseline = _baseline(args.baseline, _instances(run))
    return _show(saturation.analyse(run, baseline), args, f"vmharness report: {run.path.name}")


def cmd_compare(args: argparse.Namespace) -> int:
    from vmharness.analysis import saturation  # scipy, numpy: see the note at the top
    from vmharness.rundir.store import RunDir

    _out(args)  # refused before any work
    args.command_name = "compare"
    runs = [RunDir.open(Path(p), strict=args.strict) for p in args.run_dirs]
    baseline = _baseline(args.baseline, [f"{r.path.name}/{name}" for r in runs for name in _instances(r)])
    title = "vmharness compare: " + " vs ".join(r.path.name for r in runs)
    return _show(saturation.compare(runs, baseline), args, title)


def _options(p: argparse.ArgumentParser, baseline: str) -> None:
    p.add_argument("--format", default="text", choices=["text", "markdown", "csv", "json", "latex"],
                   help="text (default): the answer's table, the warnings that void or limit it, and where the rest "
                        "is; markdown, csv, json: every figure; latex: the table and its figures as macros for a paper")
    p.add_argument("--full", action="store_true",
                   help="with text: the full text (every warning beside its figures, the detail, every point)")
    p.add_argument("--baseline", help=baseline)
    p.add_argument("--strict", action="store_true",
                   help="refuse a run directory with a damaged record (a number out of range, an unknown kind, a "
                        "point measured twice) instead of leaving it out of every figure with a warning")
    p.add_argument("--out", metavar="DIR", help="write every form there: report.txt/.md/.csv/.json/.tex, throughput "
                                               "and latency plots (PNG, SVG, PDF) and report.html")
    p.add_argument("--force", action="store_true",
                   help="write into an --out folder no report wrote, and replace links and other files there "
                        "(never writing through them)")


def register(subs: Any, add: Any) -> None:
    p = add(subs, "report", cmd_report,
            "the answer's table: each instance's (a study's: each switch's) change in throughput and p99 at the "
            "baseline's saturation point, with intervals and a verdict, under the warnings that void or limit it "
            "(--full: every warning, the detail, every point)", "vmharness report runs/loopback --format markdown")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by bench (or run)")
    _options(p, "the instance to compare against (default: the first one)")
    p = add(subs, "compare", cmd_compare,
            "several runs as one report: every instance of every run against the first run's baseline, at its "
            "saturation point", "vmharness compare runs/kernel-6.1 runs/kernel-6.12 --out cmp/")
    p.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="run directories (named RUN/INSTANCE in the report)")
    _options(p, "RUN/INSTANCE to compare against (default: the first run's first instance)")
