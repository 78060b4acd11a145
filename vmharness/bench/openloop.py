"""The open-loop load: a constant request rate from oha, whatever the server's answers, and each
request's latency counted from when the schedule meant to send it (`--latency-correction`), so a server
that stalls is charged for the queue it builds instead of being given time by a waiting client (the
coordinated omission of a closed loop such as wrk's). oha was chosen by measuring the reachable
candidates on this machine (benchmarks/load_generators.py, docs/load.md): it holds a requested rate to
0.1% where vegeta and autocannon fall behind, and reaches 0.89 of wrk's closed-loop rate on loopback.

oha prints one CSV row per answered request; the rows are summed on the client by `SUMMARY` (POSIX awk,
after the load has ended) into counts per whole microsecond, the shape of wrk's histogram
(vmharness/rundir/histogram.py), so the result crossing ssh is a few KiB however many requests there
were, and several clients' histograms are merged exactly as wrk's are. A request that got no answer
(refused, reset, timed out, or never sent because the client fell behind) leaves no row: such requests
are `unanswered`, the schedule's (rate × duration) less the rows, which is the achieved rate's shortfall
again (`-w` lets those in flight at the deadline finish first); errors are answers that are not 2xx.

Written here, not taken from a library: oha has no histogram output finer than its 11 linear buckets,
and the client needs nothing but awk."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vmharness.bench import wrk
from vmharness.errors import HarnessError
from vmharness.rundir.histogram import Histogram

MARKER = "VMHARNESS-OPEN"
MISS = 0.02  # a point whose achieved rate is off the requested one by more than this is flagged
DEFAULT = "oha"

# stdin: oha's CSV (request-start, DNS, DNS+dialup, Response-delay, request-duration, bytes, status).
# Prints `VMHARNESS-OPEN rows bytes`, then `S status count` and `H microseconds count` lines.
SUMMARY = r"""BEGIN { FS = "," }
NR > 1 && NF >= 7 { rows++; bytes += $6; status[$7]++; h[int($5 * 1000000)]++ }
END {
  printf "%s %d %d\n", marker, rows, bytes
  for (s in status) printf "S %s %d\n", s, status[s]
  for (u in h) printf "H %d %d\n", u, h[u]
}"""

# $1: the awk program, $2 the marker; the rest: oha's command. The gate (clients.py) runs this after `go`.
PIPE = 'p="$1"; m="$2"; shift 2; "$@" | awk -v marker="$m" "$p"'


@dataclass(frozen=True)
class OpenRun:
    url: str
    rate: float  # requests/s from this client; 0: as fast as it can (what the client can generate)
    connections: int
    duration_s: float
    timeout_s: float

    def argv(self, binary: str = DEFAULT) -> list[str]:
        paced = ["-q", f"{self.rate:.3f}", "--latency-correction"] if self.rate else []
        oha = [binary, "-z", f"{self.duration_s:g}s", "-c", str(self.connections), *paced, "-w",
               "-t", f"{self.timeout_s:g}s", "--no-tui", "--output-format", "csv", self.url]
        return ["sh", "-c", PIPE, "vmh-open", SUMMARY, MARKER, *oha]

    def parse(self, stdout: str, stderr: str = "") -> dict[str, Any]:
        """The run's result in wrk.parse's shape (requests, bytes, requests_per_s achieved, errors,
        latency_us with its histogram), plus requested_per_s. HarnessError when oha printed nothing."""
        lines = stdout.splitlines()
        head = next((i for i, line in enumerate(lines) if line.startswith(MARKER + " ")), None)
        if head is None:
            said = (stdout + "\n" + stderr).splitlines()
            last = next((x.strip() for x in reversed(said) if x.strip()), "no output")
            raise HarnessError(f"oha produced no result: {last}", "is oha installed on the client (client.oha)?")
        try:
            rows, size = (int(x) for x in lines[head].split()[1:3])
            status: dict[str, int] = {}
            values: list[int] = []
            counts: list[int] = []
            for line in lines[head + 1:]:
                kind, key, n = line.split()
                if kind == "S":
                    status[key] = int(n)
                elif kind == "H":
                    values.append(int(key))
                    counts.append(int(n))
        except ValueError as exc:
            raise HarnessError(f"oha's summary is damaged: {exc}", "is awk on the client POSIX?") from exc
        h = histogram_of(values, counts)
        scheduled = round(self.rate * self.duration_s) if self.rate else rows
        bad = sum(n for s, n in status.items() if not s.startswith("2"))
        if not rows:
            last = next((x.strip() for x in reversed(stderr.splitlines()) if x.strip()), "no answer, no error")
            raise HarnessError(f"oha got no answer: {last}", "is the server up and reachable from the client?")
        errors = {**dict.fromkeys(wrk.ERROR_KINDS, 0), "status": bad, "total": bad}
        return {"requests": rows, "bytes": size, "duration_us": round(self.duration_s * 1e6),
                "requests_per_s": rows / self.duration_s, "requested_per_s": self.rate,
                "unanswered": max(0, scheduled - rows), "status": status, "errors": errors,
                "latency_us": {**h.summary(), "histogram": h.encode()}}


def histogram_of(values: list[int], counts: list[int]) -> Histogram:
    order = np.argsort(np.asarray(values, dtype=np.int64))
    v = np.asarray(values, dtype=np.int64)[order]
    c = np.asarray(counts, dtype=np.int64)[order]
    if len(v) and (v[0] < 0 or (c <= 0).any() or (np.diff(v) == 0).any()):
        raise HarnessError("oha's summary holds a negative latency, a count of 0 or a latency twice",
                           "is awk on the client POSIX?")
    return Histogram(v, c)


def off(achieved: float, requested: float) -> float:
    """How far the achieved rate is from the requested one, as a share of it."""
    return achieved / requested - 1 if requested > 0 else float("inf")


def local_binary(name: str) -> str:
    """The oha a local client runs: `name` as given if it is a path or on PATH, else the one `make`
    installs beside this Python (the virtual environment's bin/)."""
    if "/" in name or shutil.which(name):
        return name
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name
