"""What a command's start costs: a fresh interpreter that builds the parser of the command's own group
(as `vmharness` does now, vmharness/cli/main.py's GROUPS) against one that builds every group's (as it
did before, and still does for `vmharness --help`), each followed by what the command itself imports
first. The two ways alternate within each round, so that the machine's load falls on both alike.

    .venv/bin/python benchmarks/command_start.py [--rounds 10]

Prints each command's median wall time both ways and the ratio. The test rig's L1, under TCG, pays
about ten times these figures for every command the rig's tests run in it (docs/testing.md)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    # the command's group, and the module its work imports first
    "host-restore": ("host", "vmharness.experiment.ops"),
    "host-check": ("host", "vmharness.host.inspect.hostcheck.rows"),
    "tune plan": ("tune", "vmharness.tune.apply"),
    "report": ("report", "vmharness.analysis.publish"),
}


def once(group: str | None, module: str) -> float:
    probe = f"from vmharness.cli import main\nmain.build_parser({group!r})\nimport {module}\n"
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=120)
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    rounds = ap.parse_args().rounds
    print(f"{'command':<14} {'own group':>10} {'every group':>12} {'ratio':>6}   (median of {rounds}, seconds)")
    for name, (group, module) in COMMANDS.items():
        own: list[float] = []
        every: list[float] = []
        for k in range(rounds):
            ways = ((own, group), (every, None))
            for times, chosen in ways if k % 2 == 0 else reversed(ways):
                times.append(once(chosen, module))
        a, b = statistics.median(own), statistics.median(every)
        print(f"{name:<14} {a:>10.3f} {b:>12.3f} {a / b:>6.2f}")


if __name__ == "__main__":
    main()
