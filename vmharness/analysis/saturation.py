"""The answer to the researcher's question, from a run directory: the baseline's saturation point
(highest mean throughput, with how sure we are of it), each other instance's throughput and latency
change there with intervals, and the reasons not to trust the answer, listed first."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from vmharness.bench.store import RunDir
from vmharness.errors import HarnessError
from vmharness.stats import Interval, change_interval, mean_interval

LEVEL = 0.95
SATURATED = 90.0  # % busy
ERROR_SHARE = 0.01
NOISY = 0.10  # relative half-width of the throughput interval
PERCENTILES = ("50", "90", "99", "99.9")


@dataclass
class Cell:
    """One instance at one connection count: its iterations."""

    rps: list[float] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=dict)
    server_busy: list[float] = field(default_factory=list)  # the server machine, all CPUs
    worker_busy: list[float] = field(default_factory=list)  # the server's process tree, per worker
    client_busy: list[float] = field(default_factory=list)
    errors: int = 0
    requests: int = 0

    def interval(self) -> Interval:
        return mean_interval(self.rps, LEVEL)


def _busy(samples: dict[str, Any], key: str) -> float | None:
    value = samples.get(key, {}).get("cpu", {}).get("cpu", {}).get("busy")
    return float(value) if value is not None else None


def cells(run: RunDir) -> tuple[dict[str, dict[int, Cell]], int]:
    """Cells by instance and connections, and the number of failed points."""
    manifest = run.manifest
    server = manifest.get("machines", {}).get("server", {}).get("machine", "local")
    cpus = manifest.get("machines", {}).get("server", {}).get("cpus", "")
    workers = manifest.get("config", {}).get("server", {}).get("workers") or (int(cpus) if str(cpus).isdigit() else 0)
    clients = [c["machine"] for c in manifest.get("machines", {}).get("clients", [])]
    out: dict[str, dict[int, Cell]] = {}
    failed = 0
    for r in run.records():
        if r.get("kind") != "measurement":
            continue
        if not r.get("ok"):
            failed += 1
            continue
        cell = out.setdefault(r["instance"], {}).setdefault(r["connections"], Cell())
        client = r["client"]
        cell.rps.append(float(client["requests_per_s"]))
        for q in PERCENTILES:
            cell.latency.setdefault(q, []).append(float(client["latency_us"]["percentiles"][q]))
        cell.errors += int(client["errors"]["total"])
        cell.requests += int(client["requests"])
        busy = _busy(r.get("samples", {}), server)
        if busy is not None:
            cell.server_busy.append(busy)
        process = r.get("samples", {}).get(server, {}).get("process")
        if process and workers:
            cell.worker_busy.append(min(100.0, process["cpu_percent_of_one"] / workers))
        loads = [b for b in (_busy(r.get("samples", {}), c) for c in clients if c != server) if b is not None]
        if loads:
            cell.client_busy.append(max(loads))
    return out, failed


@dataclass
class Analysis:
    baseline: str
    peak: int | None
    peak_interval: Interval | None
    plausible_peaks: list[int]
    changes: dict[str, dict[str, Interval]]  # instance -> "throughput" / "p99" ... -> relative change
    flags: list[str]
    cells: dict[str, dict[int, Cell]]
    failed: int


def session_flags(run: RunDir, prefix: str = "") -> list[str]:
    """`vmharness run`'s guests that did not boot or could not serve, each with why, and those whose
    QEMU threads were not held to the planned CPUs."""
    out = []
    for r in run.records():
        if r.get("kind") != "session":
            continue
        where = f"{prefix}{r['instance']} iteration {r['iteration']}"
        pins = r.get("pinning") or {}
        if not r.get("ok"):
            out.append(f"{where} measured nothing: {r.get('error', '?')}")
        elif pins.get("ok") is False:
            out.append(f"not pinned: {where}'s vCPU threads ran on CPUs {pins['vcpus']} and its emulator on "
                       f"{pins['emulator']!r}, planned {pins['planned_vcpus']} and {pins['planned_emulator']}")
    return out


def analyse(run: RunDir, baseline: str | None = None) -> Analysis:
    table, failed = cells(run)
    names = [i["name"] for i in run.manifest.get("config", {}).get("instance", [])] or sorted(table)
    return analyse_table(table, failed, baseline or (names[0] if names else None), [run.manifest],
                         session_flags(run))


def compare(runs: list[RunDir], baseline: str | None = None) -> Analysis:
    """Several runs as one: each instance named RUN/INSTANCE; the baseline is the first run's first
    instance unless named. Points are compared only at equal connection counts."""
    table: dict[str, dict[int, Cell]] = {}
    failed = 0
    first = None
    sessions: list[str] = []
    for run in runs:
        cells_of, lost = cells(run)
        failed += lost
        sessions += session_flags(run, f"{run.path.name}/")
        names = [i["name"] for i in run.manifest.get("config", {}).get("instance", [])] or sorted(cells_of)
        for name in names:
            if name in cells_of:
                key = f"{run.path.name}/{name}"
                if key in table:
                    raise HarnessError(f"two runs are both named {run.path.name}", "compare runs in folders of "
                                       "different names")
                table[key] = cells_of[name]
                first = first or key
    return analyse_table(table, failed, baseline or first, [r.manifest for r in runs], sessions)


def analyse_table(table: dict[str, dict[int, Cell]], failed: int, baseline: str | None,
                  manifests: list[dict[str, Any]], sessions: list[str] | None = None) -> Analysis:
    flags: list[str] = list(sessions or [])
    if failed:
        flags.append(f"{failed} points failed after their retries: see records.jsonl")
    if not table:
        return Analysis(baseline or "?", None, None, [], {}, ["no successful measurement in this run", *flags],
                        table, failed)
    base = baseline or sorted(table)[0]
    if base not in table:
        return Analysis(base, None, None, [], {}, [f"the baseline {base!r} has no successful measurement", *flags],
                        table, failed)
    curve = {c: cell.interval() for c, cell in table[base].items()}
    peak = max(curve, key=lambda c: curve[c].mean)
    plausible = sorted(c for c, iv in curve.items() if c != peak and iv.high >= curve[peak].low)
    cell = table[base][peak]
    _flags(manifests, peak, cell, curve, plausible, table, flags)
    changes: dict[str, dict[str, Interval]] = {}
    for name, by_count in table.items():
        if name == base or peak not in by_count:
            continue
        other = by_count[peak]
        changes[name] = {"throughput": change_interval(cell.rps, other.rps, LEVEL)}
        for q in PERCENTILES:
            changes[name][f"p{q}"] = change_interval(cell.latency[q], other.latency[q], LEVEL)
    return Analysis(base, peak, curve[peak], plausible, changes, flags, table, failed)


def _flags(manifests: list[dict[str, Any]], peak: int, cell: Cell, curve: dict[int, Interval],
           plausible: list[int], table: dict[str, dict[int, Cell]], flags: list[str]) -> None:
    machine_busy = statistics.fmean(cell.server_busy) if cell.server_busy else None
    worker_busy = statistics.fmean(cell.worker_busy) if cell.worker_busy else None
    known = [b for b in (machine_busy, worker_busy) if b is not None]
    server_busy = max(known) if known else None  # its workers saturated count, even on a larger machine
    if server_busy is not None and server_busy < SATURATED:
        flags.append(f"not saturated: the server was {server_busy:.0f}% busy at the peak ({peak} connections); "
                     "overhead is hidden by idle CPU (seed 001)")
    if cell.client_busy and statistics.fmean(cell.client_busy) >= SATURATED and (server_busy or 0) < SATURATED:
        flags.append(f"client-bound: a client was {statistics.fmean(cell.client_busy):.0f}% busy at the peak while "
                     "the server was not; this measures the client (seed 003)")
    for manifest in manifests:
        machines = manifest.get("machines", {})
        server = machines.get("server", {}).get("machine")
        if server in [c.get("machine") for c in machines.get("clients", [])]:
            flags.append("the server and a client share a machine: their CPU use cannot be told apart")
            break
        if manifest.get("guest", {}).get("shares_host_with_client"):
            flags.append("the guest runs on a client's machine: wrk and the guest's vCPUs share its CPUs")
            break
    if peak == max(curve):
        flags.append(f"the throughput peaks at the largest count ({peak}): it may still rise; extend the sweep")
    if plausible:
        flags.append(f"the peak is not distinct: {', '.join(map(str, plausible))} connections are within its "
                     f"{LEVEL:.0%} interval")
    if curve[peak].n < 2:
        flags.append("one iteration at the peak: no interval, so no overhead can be told from noise; add iterations")
    elif curve[peak].relative_half > NOISY:
        flags.append(f"noisy: the peak's {LEVEL:.0%} interval is ±{curve[peak].relative_half:.0%} of its mean "
                     f"over {curve[peak].n} iterations; add iterations")
    for name, by_count in table.items():
        for count, c in sorted(by_count.items()):
            if c.requests and c.errors / c.requests > ERROR_SHARE:
                flags.append(f"errors: {name} at {count} connections had {c.errors / c.requests:.1%} errors "
                             "or non-2xx responses")
    if any(m.get("guest", {}).get("kvm") is False for m in manifests):
        flags.append("no KVM: the guest ran under TCG; these are not hardware numbers")
