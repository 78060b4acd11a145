"""Run inspection commands on a host and on a host-snapshot of it, and say where the two differ.

Everything runs in one process (`vmharness.cli.main`), so that inside the nested rig, where every
interpreter start costs seconds under TCG, the whole comparison is one command:
    python -m tests.snapshot_compare WORKDIR [--once] -- host-check --json -- tune plan --json ...
prints a JSON list, one entry per command. A fresh snapshot is taken just before each command runs
on the host, so that a host that other work is changing (the CI machine) is compared with itself as
it was a moment ago, not minutes ago; with --once, one snapshot serves every command (the rig's L1,
which nothing else changes).

Each entry holds both outcomes (exit code, stdout, stderr) after `normalise`, and `unread`: the paths
the snapshot run read (root.recording()) that exist on the host but not in the snapshot, which must
be empty if the snapshot holds all the command needs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

from vmharness.cli.main import main
from vmharness.system import root as host_root

# Knobs whose state comes from running a program on the machine (ethtool, a scan for irqbalance): a
# snapshot holds files, not programs, so on one the plan says it cannot tell (docs/tuning.md).
PROGRAM_KNOBS = ("irqbalance", "coalescing", "channels")
# Drawn afresh by every run (two runs on the same host differ in them too): the run id, in the domain
# name, owner and tap device; each domain's UUID; each guest's MAC address.
FRESH = ((re.compile(r"\br[0-9a-f]{10}\b"), "rRUNID"), (re.compile(r"run:[0-9a-f]{10}\b"), "run:RUNID"),
         (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "UUID"),
         (re.compile(r"\b52:54:00(?::[0-9a-f]{2}){3}\b"), "MAC"))


def outcome(argv: list[str]) -> tuple[int, str, str, set[str]]:
    """Exit code, stdout, stderr, and the host paths read."""
    out, err = io.StringIO(), io.StringIO()
    with host_root.recording() as reads, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue(), set(reads)


def _is_tune_json(argv: list[str]) -> bool:
    return argv[:2] == ["tune", "plan"] and "--json" in argv


def _tune(text: str) -> str:
    """A tune plan's JSON without the knobs that need programs run (see PROGRAM_KNOBS)."""
    plan = json.loads(text)
    for key in ("changes", "kept", "skipped"):
        plan[key] = [k for k in plan[key] if k["knob"] not in PROGRAM_KNOBS]
    return json.dumps(plan, indent=2)


def normalise(argv: list[str], out: str, err: str, snap: Path | None) -> tuple[str, str]:
    """What must differ, made equal: the root's name in text (a snapshot run names its root where the
    host says "the live host"), what a run draws afresh (FRESH), and the program-dependent knobs
    of a tune plan (PROGRAM_KNOBS)."""
    if snap is not None:
        out, err = (s.replace(f"host root {snap}", "the live host") for s in (out, err))
    if _is_tune_json(argv) and out:
        out = _tune(out)
    if argv[0] == "run":
        for pattern, name in FRESH:
            out, err = pattern.sub(name, out), pattern.sub(name, err)
    return out, err


def program_knobs_said(out: str) -> bool:
    """A tune plan on a snapshot names each program-dependent knob it met as skipped, saying why."""
    skipped = json.loads(out)["skipped"]
    return all("host root" in k["why"] for k in skipped if k["knob"] in PROGRAM_KNOBS)


def take(workdir: Path) -> Path:
    """A fresh host-snapshot of this host, unpacked under `workdir`."""
    tarball, snap = workdir / "snap.tar.gz", workdir / "snap"
    shutil.rmtree(snap, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    code, out, err, _ = outcome(["host-snapshot", str(tarball)])
    if code != 0:
        raise RuntimeError(f"host-snapshot failed: {out}{err}")
    snap.mkdir(parents=True)
    with tarfile.open(tarball) as t:
        t.extractall(snap, filter="tar")
    return snap


def compare(workdir: Path, commands: list[list[str]], once: bool = False) -> list[dict[str, Any]]:
    """`once`: one snapshot for all the commands, where nothing else changes the host meanwhile (the rig's
    L1, where each snapshot took 17-19 s under TCG)."""
    results = []
    shared = take(workdir) if once else None
    for argv in commands:
        snap = shared or take(workdir)
        code, out, err, _ = outcome(argv)
        live = [code, *normalise(argv, out, err, None)]
        code, out, err, reads = outcome([*argv, "--host-root", str(snap)])
        said = program_knobs_said(out) if _is_tune_json(argv) and code == 0 else True
        copy = [code, *normalise(argv, out, err, snap)]
        unread = sorted(p for p in reads if os.path.lexists(p) and not os.path.lexists(f"{snap}{p}"))
        results.append({"argv": argv, "live": live, "snapshot": copy, "unread": unread, "program_knobs_said": said})
    return results


def split(args: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for a in args:
        if a == "--":
            commands.append([])
        else:
            commands[-1].append(a)
    return [c for c in commands if c]


if __name__ == "__main__":
    once = sys.argv[2:3] == ["--once"]
    print(json.dumps(compare(Path(sys.argv[1]), split(sys.argv[2 + once:]), once), indent=2))
