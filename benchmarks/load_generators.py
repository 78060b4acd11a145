"""Which open-loop (constant-rate) load generator vmharness uses, chosen by measuring the reachable
candidates on this machine against one loopback nginx (bench_fidelity.py's stock server, one worker):

    .venv/bin/python benchmarks/load_generators.py [--duration 5] [--rounds 3] [--connections 32]

- vegeta (Go module proxy), oha (crates.io), autocannon (npm): each at its own constant-rate mode;
- wrk with a pacing script (wrk's Lua delay() hook: a connection waits connections/rate between a
  response and its next request). wrk2 is not a candidate: no reachable source carries it (not in
  Debian, not on the Go module proxy, not on npm).

For each, in rounds with the candidates' order rotated: the rate it reaches with no rate set (its
capacity here, beside wrk's closed-loop peak), and the rate it achieves when asked for 25, 50, 75
and 90% of wrk's peak (achieved/requested; the harness flags a point off by more than 2%), with its
p99. The candidates are found in --bin (default .cache/generators/, where `make bench` installs
them); a missing one is reported as missing, not skipped silently.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench_fidelity import STOCK_PORT, stock_server

from vmharness.system import proc

URL = f"http://127.0.0.1:{STOCK_PORT}/"
FRACTIONS = (25, 50, 75, 90)
PACE_LUA = """
local conns, rate = 1, 0
function init(args) conns, rate = tonumber(args[1]), tonumber(args[2]) end
function delay() if rate > 0 then return 1000 * conns / rate end return 0 end
"""

Result = tuple[float, float]  # achieved requests/s, p99 in microseconds
Runner = Callable[[float | None, int, int], Result]


def _json(argv: list[str], timeout: float) -> dict[str, object]:
    out = proc.run(argv, timeout=timeout).stdout
    start = out.find("{")
    if start < 0:
        raise RuntimeError(f"{argv[0]} printed no JSON: {out[-300:]}")
    data: dict[str, object] = json.loads(out[start:])
    return data


def vegeta(binary: str) -> Runner:
    def run(rate: float | None, duration: int, conns: int) -> Result:
        argv = ["sh", "-c", 'printf "GET %s\\n" "$3" | "$1" attack -rate="$2" -duration="$4"s '
                '-max-workers="$5" -max-connections="$5" | "$1" report -type=json',
                "vegeta", binary, f"{rate:.0f}/s" if rate else "0", URL, str(duration), str(conns)]
        data = _json(argv, duration + 60)
        lat = data["latencies"]
        assert isinstance(lat, dict)
        return float(data["requests"]) / (float(data["duration"]) / 1e9), lat["99th"] / 1e3  # type: ignore[arg-type]
    return run


def oha(binary: str) -> Runner:
    def run(rate: float | None, duration: int, conns: int) -> Result:
        argv = [binary, "-z", f"{duration}s", "-c", str(conns), "--no-tui", "--output-format", "json"]
        if rate:
            argv += ["-q", f"{rate:.0f}", "--latency-correction"]
        data = _json([*argv, URL], duration + 60)
        summary, pct = data["summary"], data["latencyPercentiles"]
        assert isinstance(summary, dict) and isinstance(pct, dict)
        return float(summary["requestsPerSec"]), float(pct["p99"]) * 1e6
    return run


def autocannon(binary: str) -> Runner:
    def run(rate: float | None, duration: int, conns: int) -> Result:
        argv = [binary, "--json", "--duration", str(duration), "--connections", str(conns)]
        if rate:
            argv += ["--overallRate", f"{rate:.0f}"]
        data = _json([*argv, URL], duration + 60)
        lat = data["latency"]
        assert isinstance(lat, dict)
        return float(data["requests"]["total"]) / duration, float(lat["p99"]) * 1e3  # type: ignore[index]
    return run


def wrk_paced(script: Path) -> Runner:
    def run(rate: float | None, duration: int, conns: int) -> Result:
        argv = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", "-s", str(script), URL, "--",
                str(conns), f"{rate or 0:.0f}"]
        out = proc.run(argv, timeout=duration + 60).stdout
        rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
        p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
        if rps is None or p99 is None:
            raise RuntimeError(f"wrk printed no result: {out[-300:]}")
        scale = {"us": 1.0, "ms": 1e3, "s": 1e6}[p99.group(2)]
        return float(rps.group(1)), float(p99.group(1)) * scale
    return run


def wrk_peak(duration: int, conns: int) -> float:
    out = proc.run(["wrk", "-t1", f"-c{conns}", f"-d{duration}s", URL], timeout=duration + 60).stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise SystemExit(f"wrk printed no Requests/sec line:\n{out}")
    return float(found.group(1))


def version(argv: list[str]) -> str:
    res = proc.run(argv, timeout=30, check=False)
    text = (res.stdout + res.stderr).strip()
    return text.splitlines()[0] if text else "?"


def candidates(bin_dir: Path, script: Path) -> dict[str, tuple[Runner | None, str]]:
    paths = {"vegeta": bin_dir / "bin" / "vegeta", "oha": bin_dir / "bin" / "oha",
             "autocannon": bin_dir / "node_modules" / ".bin" / "autocannon"}
    found: dict[str, tuple[Runner | None, str]] = {}
    for name, make in (("vegeta", vegeta), ("oha", oha), ("autocannon", autocannon)):
        path = paths[name]
        if path.exists():
            flag = "-version" if name == "vegeta" else "--version"
            found[name] = (make(str(path)), version([str(path), flag]))
        else:
            found[name] = (None, f"missing: {path}")
    found["wrk + pacing script"] = (wrk_paced(script), version(["wrk", "--version"]))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--bin", type=Path, default=Path(".cache/generators"))
    args = ap.parse_args()
    d, c = args.duration, args.connections
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "pace.lua"
        script.write_text(PACE_LUA)
        stock_server(Path(tmp), 64)
        pid = int((Path(tmp) / "stock" / "nginx.pid").read_text())
        try:
            gens = candidates(args.bin, script)
            live = [name for name, (run, _) in gens.items() if run is not None]
            peaks: list[float] = []
            capacity: dict[str, list[float]] = {n: [] for n in live}
            ratio: dict[str, dict[int, list[float]]] = {n: {f: [] for f in FRACTIONS} for n in live}
            p99: dict[str, dict[int, list[float]]] = {n: {f: [] for f in FRACTIONS} for n in live}
            for r in range(args.rounds):
                peak = wrk_peak(d, c)
                peaks.append(peak)
                order = live[r % len(live):] + live[:r % len(live)]
                for name in order:
                    run = gens[name][0]
                    assert run is not None
                    capacity[name].append(run(None, d, c)[0])
                    for f in FRACTIONS:
                        want = peak * f / 100
                        got, tail = run(want, d, c)
                        ratio[name][f].append(got / want)
                        p99[name][f].append(tail)
                print(f"round {r + 1}: wrk closed-loop peak {peak:,.0f} req/s; capacity "
                      + ", ".join(f"{n} {capacity[n][-1]:,.0f}" for n in live), flush=True)
        finally:
            proc.run(["kill", "-QUIT", str(pid)], timeout=10, check=False)
    peak = statistics.fmean(peaks)
    print(f"\n{args.rounds} rounds, {d} s each, {c} connections, one nginx worker on loopback; "
          f"wrk's closed-loop peak {peak:,.0f} req/s (mean)")
    head = " | ".join(f"achieved/requested at {f}%" for f in FRACTIONS)
    print(f"| generator | version | capacity, req/s (share of wrk's peak) | {head} | p99 at 90%, us |")
    print("|" + "---|" * (4 + len(FRACTIONS)))
    for name, (run, ver) in gens.items():
        if run is None:
            print(f"| {name} | {ver} | not measured |" + " |" * (len(FRACTIONS) + 1))
            continue
        cap = statistics.fmean(capacity[name])
        cells = " | ".join(f"{min(ratio[name][f]):.3f}–{max(ratio[name][f]):.3f}" for f in FRACTIONS)
        print(f"| {name} | {ver} | {cap:,.0f} ({cap / peak:.2f}) | {cells} | "
              f"{statistics.fmean(p99[name][90]):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
