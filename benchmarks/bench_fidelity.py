"""Is the harness's server as fast as a stock one, does the harness measure what wrk measures, and
what does its sampling cost? Three ratios, each from interleaved rounds on loopback:

    .venv/bin/python benchmarks/bench_fidelity.py [--connections 16] [--duration 5] [--rounds 12]

1. server: plain `wrk` against the harness's nginx (vmharness/data/guest-setup/, one worker)
   over plain `wrk` against a stock nginx whose configuration is written below, independently of the
   template (nginx's compiled-in defaults; only the port, the root and the one file are given).
   Packets per request on `lo` are printed for both: a small response should leave in one segment.
2. measurement: the harness's own measurement (wrk behind the start gate, report.lua) over plain
   `wrk`, against the same (harness) server.
3. sampling: plain `wrk` with the samplers running over plain `wrk` with none.
Prints every round, then each ratio as the geometric mean of the rounds' ratios with its 95%
t-interval (paired by round: vmharness.stats.ratio_change), and min and max. The servers' processes
are held to the last CPU and wrk to the others (`taskset`), so that on a 2-core machine the two do
not trade CPUs from round to round: the scheduler's placement, not the server, was most of the spread
of unpinned rounds. Needs root (servers are journaled).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vmharness import stats
from vmharness.bench import bench, clients, sampler, server
from vmharness.journal import journal
from vmharness.rundir.store import RunDir
from vmharness.system import proc
from vmharness.system.machine import Machine
from vmharness.system.root import HostRoot

HARNESS_PORT, STOCK_PORT = 18199, 18198
HARNESS_URL = f"http://127.0.0.1:{HARNESS_PORT}/"
STOCK_CONF = """worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{}}
http {{
    access_log off;
{extra}    server {{
        listen 127.0.0.1:{port};
        root {prefix}/www;
        location = / {{ try_files /index.bin =404; }}
    }}
}}
"""


def lo_packets() -> int:
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            fields = rest.split()
            return int(fields[1]) + int(fields[9])
    raise SystemExit("no lo in /proc/net/dev")


def cpus() -> tuple[tuple[int, ...], int]:
    """wrk's CPUs and the servers' one (the last): on one CPU, every CPU."""
    n = len(os.sched_getaffinity(0))
    online = tuple(sorted(os.sched_getaffinity(0)))
    return (online[:-1], online[-1]) if n > 1 else (online, online[0])


def pin(pids: list[int], cpu: int) -> None:
    """A server's processes (master and workers, all their threads) onto one CPU, checked."""
    for pid in pids:
        proc.run(["taskset", "--all-tasks", "--pid", "--cpu-list", str(cpu), str(pid)], timeout=10)
        allowed = [line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("Cpus_allowed_list:")]
        if allowed != [str(cpu)]:
            raise SystemExit(f"process {pid} may run on CPUs {allowed}, not {cpu} alone")


def tree(pid: int) -> list[int]:
    """`pid` and its children (an nginx master and its workers)."""
    kids = proc.run(["pgrep", "-P", str(pid)], timeout=10, check=False).stdout.split()
    return [pid, *(int(k) for k in kids)]


def plain_wrk(port: int, connections: int, duration: int) -> tuple[float, float]:
    """Requests/s, and packets on lo per request (both directions)."""
    before = lo_packets()
    wrk_cpus = ",".join(map(str, cpus()[0]))
    out = proc.run(["taskset", "--cpu-list", wrk_cpus, "wrk", "-t1", f"-c{connections}", f"-d{duration}s",
                    f"http://127.0.0.1:{port}/"], timeout=duration + 60).stdout
    packets = lo_packets() - before
    if "Non-2xx" in out:  # an error page is smaller and quicker than the file: not the same work
        raise SystemExit(f"the server on port {port} answered with errors:\n{out}")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if rps is None or total is None:
        raise SystemExit(f"wrk printed no Requests/sec line:\n{out}")
    return float(rps.group(1)), packets / max(1, int(total.group(1)))


def stock_server(tmp: Path, size: int, keepalive_requests: int | None = None) -> proc.Result:
    # nginx's workers run as nobody: they must be able to reach the file (a temporary folder is 0700,
    # and a worker that cannot open the file answers 404 faster than any file is served)
    tmp.chmod(0o755)
    prefix = tmp / "stock"
    (prefix / "www").mkdir(parents=True)
    (prefix / "www" / "index.bin").write_bytes(b"x" * size)
    extra = "" if keepalive_requests is None else f"    keepalive_requests {keepalive_requests};\n"
    (prefix / "nginx.conf").write_text(STOCK_CONF.format(prefix=prefix, port=STOCK_PORT, extra=extra))
    return proc.run(["nginx", "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf")], timeout=30)


def summary(name: str, over: list[float], under: list[float]) -> str:
    """over/under, round by round: the geometric mean ratio and its paired t-interval."""
    ch = stats.ratio_change(dict(enumerate(under)), dict(enumerate(over)), "round")
    ratios = [a / b for a, b in zip(over, under, strict=True)]
    return (f"{name}: {1 + ch.change:.4f} (95%: {1 + ch.low:.4f}-{1 + ch.high:.4f}; {ch.method}), "
            f"rounds {min(ratios):.3f}-{max(ratios):.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--stock-keepalive-requests", type=int, metavar="N",
                    help="give the stock nginx the template's one deviation from nginx's defaults "
                         "(keepalive_requests; nginx closes a connection after 1000 requests)")
    args = ap.parse_args()
    c, d = args.connections, args.duration
    root = HostRoot.open(None)
    with tempfile.TemporaryDirectory() as tmp, journal.Lock(root):
        run = RunDir.create(Path(tmp) / "run", {"kind": "fidelity"})
        owner = "run:" + bench.new_id()
        cfg = server.ServerConfig(workers=1, listen=f"127.0.0.1:{HARNESS_PORT}",
                                  prefix=server.prefix_for(owner[4:], "fidelity"))
        srv = server.Server(Machine(), cfg, owner)
        wrk_cpus, server_cpu = cpus()
        client = clients.Client(Machine(), threads=1, pin=wrk_cpus)
        stock_pid = 0
        srv.start(root)
        try:
            client.prepare(root, owner)
            stock_server(Path(tmp), cfg.filesize, args.stock_keepalive_requests)
            stock_pid = int((Path(tmp) / "stock" / "nginx.pid").read_text())
            pin(tree(srv.pid) + tree(stock_pid), server_cpu)
            print(f"on CPU {server_cpu}: harness nginx {tree(srv.pid)}, stock nginx {tree(stock_pid)}", flush=True)
            rps: dict[str, list[float]] = {"harness": [], "stock": [], "measured": [], "sampled": []}
            packets: dict[str, list[float]] = {"harness": [], "stock": []}
            for n in range(1, args.rounds + 1):
                def harness_plain() -> float:
                    rps, per = plain_wrk(HARNESS_PORT, c, d)
                    packets["harness"].append(per)
                    return rps

                def stock_plain() -> float:
                    rps, per = plain_wrk(STOCK_PORT, c, d)
                    packets["stock"].append(per)
                    return rps

                def measured() -> float:
                    runs, _, _ = clients.run_together(clients.wrk_runs([client], HARNESS_URL, c, d, 10))
                    return float(clients.merge(runs)["requests_per_s"])

                def sampled() -> float:
                    samplers = sampler.Samplers(run, 1.0)
                    samplers.start([Machine()])
                    try:
                        time.sleep(1.5)
                        return plain_wrk(HARNESS_PORT, c, d)[0]
                    finally:
                        samplers.stop()

                # The order within a round alternates, so drift does not always favour one side.
                steps: list[tuple[str, Callable[[], float]]] = [
                    ("harness", harness_plain), ("stock", stock_plain), ("measured", measured), ("sampled", sampled)]
                if n % 2 == 0:
                    steps.reverse()
                got = {name: f() for name, f in steps}
                for name, value in got.items():
                    rps[name].append(value)
                print(f"round {n}: harness nginx {got['harness']:9,.0f}  stock nginx {got['stock']:9,.0f}  "
                      f"measured {got['measured']:9,.0f}  sampled {got['sampled']:9,.0f} req/s", flush=True)
            print(f"{args.rounds} rounds, c={c}, {d} s each, one nginx worker (CPU {server_cpu}) and one wrk "
                  f"thread (CPU {','.join(map(str, wrk_cpus))}) on loopback")
            print(summary("server      harness nginx / stock nginx", rps["harness"], rps["stock"]))
            print(summary("measurement harness / plain wrk        ", rps["measured"], rps["harness"]))
            print(summary("sampling    samplers on / off          ", rps["sampled"], rps["harness"]))
            print(f"packets per request on lo: harness nginx {statistics.fmean(packets['harness']):.2f}, "
                  f"stock nginx {statistics.fmean(packets['stock']):.2f}")
        finally:
            if stock_pid:
                proc.run(["kill", "-TERM", str(stock_pid)], timeout=10, check=False)
            srv.stop(root)
            client.done(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
