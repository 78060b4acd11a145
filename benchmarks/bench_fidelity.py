"""Does the harness measure what wrk measures, and what does its sampling cost?

    .venv/bin/python benchmarks/bench_fidelity.py [--connections 16] [--duration 5] [--rounds 3]

Starts nginx (one worker) on loopback, then alternates, `--rounds` times, a plain `wrk` run (no
script, its "Requests/sec:" line read) with the harness's own measurement of the same point (wrk
behind the start gate, with report.lua, samplers running). Prints both figures, their ratio per round
and overall, then the sampler's CPU cost (% of one CPU) while idle and under that load.
Needs root (the server is journaled like any other).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vmharness import proc
from vmharness.bench import bench, clients, sampler, server, sweep
from vmharness.bench.store import RunDir
from vmharness.host import journal
from vmharness.host.root import HostRoot
from vmharness.machine import Machine

PORT = 18199
URL = f"http://127.0.0.1:{PORT}/"


def plain_wrk(connections: int, duration: int) -> float:
    out = proc.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", URL], timeout=duration + 60).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m is None:
        raise SystemExit(f"wrk printed no Requests/sec line:\n{out}")
    return float(m.group(1))


def sampler_cost(samplers: sweep.Samplers, seconds: float) -> float:
    since = samplers.offsets()
    start = time.time()
    time.sleep(seconds)
    summary = samplers.summaries(since, start, time.time(), {})
    return float(summary["local"].get("sampler_cpu_percent_of_one", float("nan")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = HostRoot.open(None)
    with tempfile.TemporaryDirectory() as tmp, journal.Lock(root):
        run = RunDir.create(Path(tmp) / "run", {"kind": "fidelity"})
        owner = "run:" + bench.new_id()
        srv = server.Server(Machine(), server.ServerConfig(workers=1, listen=f"127.0.0.1:{PORT}",
                                                           prefix=server.prefix_for(owner[4:], "fidelity")), owner)
        client = clients.Client(Machine(), threads=1)
        samplers = sweep.Samplers(run, 1.0)
        srv.start(root)
        try:
            client.prepare(root, owner)
            samplers.start([Machine()])
            idle = sampler_cost(samplers, 10)
            ratios, loaded = [], []
            for n in range(1, args.rounds + 1):
                direct = plain_wrk(args.connections, args.duration)
                since = samplers.offsets()
                runs, start, end = clients.run_together([client], URL, args.connections, args.duration, 10)
                merged = clients.merge(runs)
                harness = float(merged["requests_per_s"])
                summary = samplers.summaries(since, start, end, {"local": {srv.pid}})["local"]
                loaded.append(float(summary.get("sampler_cpu_percent_of_one", float("nan"))))
                ratios.append(harness / direct)
                print(f"round {n}: plain wrk {direct:10,.0f} req/s   harness {harness:10,.0f} req/s   "
                      f"ratio {harness / direct:.3f}   server CPU {sampler.busiest(summary)}%", flush=True)
            print(f"ratio harness/plain: mean {statistics.fmean(ratios):.3f}, min {min(ratios):.3f}, "
                  f"max {max(ratios):.3f} ({args.rounds} rounds, c={args.connections}, {args.duration} s each)")
            print(f"sampler cost at 1 s: idle {idle:.2f}% of one CPU, under load "
                  f"{statistics.fmean(loaded):.2f}% (mean of {len(loaded)})")
        finally:
            samplers.stop()
            srv.stop(root)
            client.done(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
