"""wrk, the load generator: its command line, and its result read from the JSON line that report.lua's
done() hook prints (wrk's own text is kept raw beside it, never scraped), its latency histogram
checked here (vmharness/rundir/histogram.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.rundir.histogram import Histogram

REPORT_LUA = Path(__file__).with_name("report.lua")
MARKER = "VMHARNESS-WRK "
ERROR_KINDS = ("connect", "read", "write", "status", "timeout")


@dataclass(frozen=True)
class WrkRun:
    url: str
    connections: int
    threads: int
    duration_s: float
    timeout_s: float
    script: str  # path of report.lua on the client machine
    pipeline: int = 1  # requests each connection sends back to back (HTTP/1.1 pipelining)

    def argv(self, binary: str = "wrk") -> list[str]:
        argv = [binary, "--threads", str(self.threads), "--connections", str(self.connections),
                "--duration", f"{self.duration_s:g}s", "--timeout", f"{self.timeout_s:g}s", "--latency",
                "--script", self.script, self.url]
        return [*argv, "--", str(self.pipeline)] if self.pipeline > 1 else argv

    def parse(self, stdout: str, stderr: str = "") -> dict[str, Any]:
        return parse(stdout, stderr)


def parse(stdout: str, stderr: str = "") -> dict[str, Any]:
    """The result of one wrk run, with requests/s and the error total added. A run without the
    report line (wrk could not connect, or died) is a HarnessError quoting wrk's last line."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data: dict[str, Any] = json.loads(line[len(MARKER):])
            except ValueError as exc:
                raise HarnessError(f"wrk's report line is not JSON: {line[:120]}", "is report.lua intact?") from exc
            try:
                if data["latency_us"].get("histogram") is not None:
                    Histogram.decode(data["latency_us"]["histogram"])
            except ValueError as exc:
                raise HarnessError(f"wrk's report line holds a damaged latency histogram: {exc}",
                                   "is report.lua intact?") from exc
            seconds = data["duration_us"] / 1e6
            data["requests_per_s"] = data["requests"] / seconds if seconds > 0 else 0.0
            data["errors"]["total"] = sum(data["errors"][k] for k in ERROR_KINDS)
            return data
    said = (stdout + "\n" + stderr).splitlines()
    last = next((line.strip() for line in reversed(said) if line.strip()), "no output")
    raise HarnessError(f"wrk produced no result: {last}", "is the server up and reachable from the client?")


def default_threads(connections: int, client_cpus: int) -> int:
    return max(1, min(connections, client_cpus))
