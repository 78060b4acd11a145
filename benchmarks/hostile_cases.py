"""The hostile tables' commands two ways in one run: each in a fresh `python -m vmharness.cli`, and each
forked from the server that imported the harness once (tests/forked_cli.py, as tests/hostile_kit.py
runs them). Both run the same cases, one at a time, in working folders laid out alike; the order of
the two ways alternates by round.

    .venv/bin/python benchmarks/hostile_cases.py [--cases 120] [--rounds 2]

Prints each way's wall time per round, the ratio, and how many cases ended with a different exit
status (there should be none)."""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import forked_cli
from tests.hostile_kit import TIMEOUT, Case
from tests.unit import test_hostile, test_hostile_records, test_hostile_values


def cases(n: int) -> list[Case]:
    tables = (test_hostile.CASES, test_hostile_records.CASES, test_hostile_values.CASES)
    return list(itertools.islice((c for group in zip(*tables, strict=False) for c in group), n))  # a mix of the tables


def fresh(case: Case, cwd: Path, env: dict[str, str]) -> int:
    cp = subprocess.run([sys.executable, "-m", "vmharness.cli", *case.argv], cwd=cwd, env=env, timeout=TIMEOUT,
                        capture_output=True, stdin=subprocess.DEVNULL)
    return cp.returncode


def forked(case: Case, cwd: Path, env: dict[str, str]) -> int:
    code = forked_cli.run(case.argv, cwd, env, TIMEOUT, cwd.parent / f"{cwd.name}.out", cwd.parent / f"{cwd.name}.err")
    return -1 if code is None else code


def one_way(way: str, chosen: list[Case], base: Path) -> tuple[float, dict[str, int]]:
    run = fresh if way == "fresh" else forked
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_")}
    codes = {}
    started = time.monotonic()
    for case in chosen:
        cwd = base / way / case.id
        cwd.mkdir(parents=True)
        if case.build:
            case.build(cwd)
        codes[case.id] = run(case, cwd, {**env, **case.env})
    return time.monotonic() - started, codes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    chosen = cases(args.cases)
    null = Path(os.devnull)
    forked_cli.run(("--version",), Path.cwd(), dict(os.environ), TIMEOUT, null, null)  # the server up
    for r in range(args.rounds):
        ways = ("fresh", "forked") if r % 2 == 0 else ("forked", "fresh")
        with tempfile.TemporaryDirectory(prefix="vmh-bench-hostile-") as tmp:
            took = {w: one_way(w, chosen, Path(tmp)) for w in ways}
        differ = sum(took["fresh"][1][c.id] != took["forked"][1][c.id] for c in chosen)
        print(f"round {r + 1}: {len(chosen)} cases, fresh interpreter {took['fresh'][0]:.1f} s, forked "
              f"{took['forked'][0]:.1f} s, ratio {took['fresh'][0] / took['forked'][0]:.1f}x; "
              f"{differ} case(s) ended differently")
    return 0


if __name__ == "__main__":
    sys.exit(main())
