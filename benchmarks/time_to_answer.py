"""Time to the answer: seed 001's fixed grid against the adaptive search, on the same target, in one run.

    .venv/bin/python benchmarks/time_to_answer.py [--filesize 4096] [--duration 3] [--rounds 1]
    .venv/bin/python -m vmharness.host.libvirt.daemon .venv/bin/python benchmarks/time_to_answer.py --guest
    .venv/bin/python -m vmharness.host.libvirt.daemon .venv/bin/python benchmarks/time_to_answer.py --study

The target is nginx on loopback (`vmharness bench`), one worker, with the response size as its
per-request cost (--filesize); with --guest it is the image's guest under TCG (`vmharness run`, one
instance, a boot per iteration), on a range scaled to what one emulated vCPU holds. Each search runs
as the command a researcher would type, into its own run directory, and the report's analysis reads
the answer from it: the baseline's peak (where and how high). The grid is seed 001's (16 to 1536
connections, 24 counts) with 3 iterations and no early stop; the adaptive search spans the same range
(sweep.search = "adaptive": a ladder, golden-section refinement, a pilot round, then as many rounds at
the peak, each with as many measurements, as the pilot's noise split plans for a 95% interval within
±2%, or the grid's 3 when that is out of reach: bench/budget.py). --rounds N repeats the pair,
alternating which goes first.

Prints each search's wall time, points, measurements and peak; then the ratio of wall times, the
difference in peak height, and the distance of the peak's location in steps of the grid.

--study: an attribution study of four switches (`[study]`: the reference `on` with pti forced, each
switch left out, all off; under TCG one of them changes nothing and is dropped after one boot) on the
guest under TCG, run twice on the same grid (STUDY_GRID, 3 iterations): with `sweep.variants = "peak"`
(only the reference sweeps, the others are measured at the count where its first boot peaked) and with
every instance swept at every count. Prints both wall times and both answers: each switch's marginal
cost in throughput at the reference's peak with its Bonferroni interval, and the switches dropped.
Needs root (nginx is journaled as it would be in a real run); --guest also libvirtd and the image.
"""

from __future__ import annotations

import argparse
import bisect
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vmharness import stats
from vmharness.analysis import saturation
from vmharness.model import connections
from vmharness.rundir.store import RunDir
from vmharness.system import proc

GRID = "16:256:16,256:1024:128,1024:1536:256"  # seed 001's three ranges
GUEST_GRID = "1:8:1,8:32:4,32:64:8"  # the same shape, where one TCG vCPU saturates
STUDY_GRID = "1,2,4,8,16,32"  # a study's six counts: the reference sweeps them, and in the other mode all do
SWITCHES = ("pti", "spectre_v2", "spectre_v1", "spec_store_bypass_disable")


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
            f'warmup = 1\n{adaptive}[load]\npercents = []\ncapacity = 0\n')  # the peak alone: no latency curve


def study_toml(variants: str, grid: str, filesize: int, duration: int) -> str:
    switches = ", ".join(f'"{s}"' for s in SWITCHES)
    return (f'[guest]\nvcpus = 1\nmemory = 768\n[server]\nfilesize = {filesize}\n'
            '[[instance]]\nname = "on"\ncmdline = "pti=on"\n'
            f'[study]\nswitches = [{switches}]\n[[client]]\nhost = "local"\nthreads = 1\n'
            f'[sweep]\nconnections = "{grid}"\niterations = 3\nduration = {duration}\nwait = 0.2\n'
            f'warmup = 1\nvariants = "{variants}"\n[load]\npercents = []\ncapacity = 0\n')


def one(kind: str, search: str, grid: str, args: argparse.Namespace, where: Path) -> dict[str, Any]:
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
    boots = len({r["iteration"] for r in run.records() if r.get("kind") == "session"})
    return {"seconds": took, "points": len({r["connections"] for r in ok}), "measurements": len(ok),
            "peak_at": a.peak, "peak": a.peak_interval.mean, "at_peak_n": a.peak_interval.n, "boots": boots,
            "blocks": a.cells[a.baseline][a.peak].by_block(a.cells[a.baseline][a.peak].rps)}


def study(variants: str, args: argparse.Namespace, where: Path) -> dict[str, Any]:
    """One study run: its wall time, measurements, the reference's peak and each switch's marginal cost."""
    cfg = where / f"study-{variants}.toml"
    cfg.write_text(study_toml(variants, STUDY_GRID, args.filesize, args.duration))
    out = where / f"study-{variants}"
    t0 = time.monotonic()
    proc.run([sys.executable, "-m", "vmharness", "run", str(cfg), "--out", str(out)], timeout=6 * 3600)
    took = time.monotonic() - t0
    run = RunDir.open(out)
    a = saturation.analyse(run)
    ok = [r for r in run.records() if r.get("kind") == "measurement" and r.get("ok")]
    boots = [r for r in run.records() if r.get("kind") == "session"]
    if a.study is None or not a.study.studies:
        raise SystemExit(f"study {variants}: no attribution in {out}: {a.flags}")
    throughput = next(s for s in a.study.studies if s.metric == "throughput")
    return {"seconds": took, "measurements": len(ok), "boots": len(boots), "peak_at": a.peak,
            "marginals": {m.switch: m for m in throughput.marginals}, "left_out": a.study.left_out}


def print_study(variants: str, got: dict[str, Any]) -> None:
    print(f"study, {'the reference sweeps' if variants == 'peak' else 'every instance sweeps'} "
          f"(variants = \"{variants}\"): {got['seconds']:.1f} s, {got['boots']} boots, "
          f"{got['measurements']} measurements; the reference peaks at {got['peak_at']} connections", flush=True)
    for name, m in got["marginals"].items():
        c = m.change
        print(f"  {name}: {c.change:+.1%} [{c.low:+.1%}, {c.high:+.1%}]"
              f"{', a change by Holm' if m.holm_rejects else ''}", flush=True)
    for name, why in got["left_out"].items():
        print(f"  {name}: left out: {why}", flush=True)


def studies(args: argparse.Namespace, base: Path) -> None:
    """The four-switch study both ways, in one run (alternating which goes first by round)."""
    print(f"target: an attribution study of {', '.join(SWITCHES)} on the guest under TCG, grid {STUDY_GRID}, "
          f"3 iterations, {args.duration} s per measurement", flush=True)
    for r in range(args.rounds):
        where = base / f"round{r + 1}"
        where.mkdir(parents=True, exist_ok=True)
        got = {}
        for variants in (("peak", "sweep") if r % 2 == 0 else ("sweep", "peak")):
            got[variants] = study(variants, args, where)
            print_study(variants, got[variants])
        p, s = got["peak"], got["sweep"]
        print(f"round {r + 1}: time ratio peak/sweep {p['seconds'] / s['seconds']:.2f}; the reference's peak at "
              f"{p['peak_at']} against {s['peak_at']} connections; switches found to cost by Holm: "
              f"{sorted(k for k, m in p['marginals'].items() if m.holm_rejects)} against "
              f"{sorted(k for k, m in s['marginals'].items() if m.holm_rejects)}", flush=True)


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
    ap.add_argument("--study", action="store_true", help="a four-switch study: the reference sweeping against all")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = ap.parse_args()
    if args.study:
        with tempfile.TemporaryDirectory(prefix="vmh-tta-") as tmp:
            studies(args, args.keep or Path(tmp))
        return 0
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
                      f"{g['measurements']:.0f} measurements, {g['boots']} boots; peak {g['peak']:,.0f} req/s "
                      f"at {g['peak_at']:.0f} connections (n={g['at_peak_n']:.0f})", flush=True)
            g, a = got["grid"], got["adaptive"]
            height = stats.ratio_change(g["blocks"], a["blocks"])  # unpaired: each run booted its own guests
            print(f"round {r + 1}: time ratio adaptive/grid {a['seconds'] / g['seconds']:.2f} "
                  f"(goal <= {0.5 if args.guest else 0.33}); peak height {a['peak'] / g['peak'] - 1:+.1%}, "
                  f"its {height.level:.0%} interval [{height.low:+.1%}, {height.high:+.1%}] ({height.method}; "
                  f"goal within ±2%); location "
                  f"{a['peak_at']:.0f} vs {g['peak_at']:.0f}: "
                  f"{grid_steps(counts, int(a['peak_at']), int(g['peak_at']))} grid counts between them (goal 0)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
