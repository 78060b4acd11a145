"""Time to the answer: seed 001's fixed grid against the adaptive search, on the same target, in one run.

    .venv/bin/python benchmarks/time_to_answer.py [--filesize 4096] [--duration 3] [--rounds 1]
    .venv/bin/python -m vmharness.host.libvirt.daemon .venv/bin/python benchmarks/time_to_answer.py --guest

The target is nginx on loopback (`vmharness bench`), one worker, with the response size as its
per-request cost (--filesize); with --guest it is the image's guest under TCG (`vmharness run`, one
instance, a boot per iteration), on a range scaled to what one emulated vCPU holds. Each search runs
as the command a researcher would type, into its own run directory, and the report's analysis reads
the answer from it: the baseline's peak (where and how high). The grid is seed 001's (16 to 1536
connections, 24 counts) with 3 iterations and no early stop; the adaptive search spans the same range
(sweep.search = "adaptive": a ladder, golden-section refinement, then iterations at the peak until its
95% interval is within ±2%). --rounds N repeats the pair, alternating which goes first.

Prints each search's wall time, points, measurements and peak; then the ratio of wall times, the
difference in peak height, and the distance of the peak's location in steps of the grid.
Needs root (nginx is journaled as it would be in a real run); --guest also libvirtd and the image.
"""

from __future__ import annotations

import argparse
import bisect
import sys
import tempfile
import time
from pathlib import Path

from vmharness.analysis import saturation
from vmharness.model import connections
from vmharness.rundir.store import RunDir
from vmharness.system import proc

GRID = "16:256:16,256:1024:128,1024:1536:256"  # seed 001's three ranges
GUEST_GRID = "1:8:1,8:32:4,32:64:8"  # the same shape, where one TCG vCPU saturates


def bench_toml(search: str, grid: str, filesize: int, duration: int) -> str:
    adaptive = 'search = "adaptive"\n' if search == "adaptive" else ""
    return (f'[server]\nworkers = 1\nworker_connections = 4096\nfilesize = {filesize}\n'
            'listen = "127.0.0.1:18080"\nurl = "http://127.0.0.1:18080/"\n'
            '[[instance]]\nname = "base"\n[[client]]\nhost = "local"\nthreads = 1\n'
            f'[sweep]\nconnections = "{grid}"\niterations = 3\nduration = {duration}\nwait = 0.2\n'
            f'warmup = 1\n{adaptive}[samplers]\ninterval = 1\n')


def run_toml(search: str, grid: str, filesize: int, duration: int) -> str:
    adaptive = 'search = "adaptive"\n' if search == "adaptive" else ""
    return (f'[guest]\nvcpus = 1\nmemory = 768\n[server]\nfilesize = {filesize}\n'
            '[[instance]]\nname = "base"\n[[client]]\nhost = "local"\nthreads = 1\n'
            f'[sweep]\nconnections = "{grid}"\niterations = 3\nduration = {duration}\nwait = 0.2\n'
            f'warmup = 1\n{adaptive}')


def one(kind: str, search: str, grid: str, args: argparse.Namespace, where: Path) -> dict[str, float]:
    cfg = where / f"{search}.toml"
    make = run_toml if kind == "run" else bench_toml
    cfg.write_text(make(search, grid, args.filesize, args.duration))
    out = where / search
    t0 = time.monotonic()
    proc.run([sys.executable, "-m", "vmharness", kind, str(cfg), "--out", str(out)], timeout=6 * 3600)
    took = time.monotonic() - t0
    run = RunDir.open(out)
    a = saturation.analyse(run)
    ok = [r for r in run.records() if r.get("kind") == "measurement" and r.get("ok")]
    if a.peak is None or a.peak_interval is None:
        raise SystemExit(f"{search}: no peak in {out}: {a.flags}")
    return {"seconds": took, "points": len({r["connections"] for r in ok}), "measurements": len(ok),
            "peak_at": a.peak, "peak": a.peak_interval.mean, "at_peak_n": a.peak_interval.n}


def grid_steps(counts: list[int], a: int, b: int) -> int:
    """How many grid counts lie between a and b (0: the same count or within one step)."""
    lo, hi = sorted((a, b))
    return max(0, bisect.bisect_left(counts, hi) - bisect.bisect_right(counts, lo))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filesize", type=int, default=4096, help="bytes per response: the per-request cost")
    ap.add_argument("--duration", type=int, default=3, help="seconds per measurement")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--guest", action="store_true", help="the image's guest under TCG, not loopback nginx")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = ap.parse_args()
    kind, grid = ("run", GUEST_GRID) if args.guest else ("bench", GRID)
    counts = sorted(set(connections.parse(grid)))
    print(f"target: {'the guest under TCG' if args.guest else 'loopback nginx'}, {args.filesize} B responses, "
          f"{args.duration} s per measurement; grid {grid} ({len(counts)} counts x 3 iterations)", flush=True)
    with tempfile.TemporaryDirectory(prefix="vmh-tta-") as tmp:
        base = args.keep or Path(tmp)
        for r in range(args.rounds):
            order = ("grid", "adaptive") if r % 2 == 0 else ("adaptive", "grid")
            got = {}
            for search in order:
                where = base / f"round{r + 1}"
                where.mkdir(parents=True, exist_ok=True)
                got[search] = one(kind, search, grid, args, where)
                g = got[search]
                print(f"round {r + 1} {search:8}: {g['seconds']:7.1f} s, {g['points']:.0f} counts, "
                      f"{g['measurements']:.0f} measurements; peak {g['peak']:,.0f} req/s at {g['peak_at']:.0f} "
                      f"connections (n={g['at_peak_n']:.0f})", flush=True)
            g, a = got["grid"], got["adaptive"]
            print(f"round {r + 1}: time ratio adaptive/grid {a['seconds'] / g['seconds']:.2f} (goal <= 0.33); "
                  f"peak height {a['peak'] / g['peak'] - 1:+.1%} (goal within ±2%); location "
                  f"{a['peak_at']:.0f} vs {g['peak_at']:.0f}: "
                  f"{grid_steps(counts, int(a['peak_at']), int(g['peak_at']))} grid counts between them (goal 0)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
