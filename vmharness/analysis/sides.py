"""Saturation from both sides of the wire, at one point: the server's CPU without steal and the steal
beside it; the host's view of a guest (its vCPU threads' runtime, vmharness/bench/hostview.py, and the
interrupts it took for the passed-through NICs); each client machine's CPU and each load generator
thread's share of a core (vmharness/bench/threads.py). Each warning shows the figure it rests on."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from vmharness.rundir.sample_summary import busy_share

SATURATED = 90.0  # % busy: a server below it at the peak is not saturated; a client thread at it is bound
STEAL = 5.0  # % of the time stolen from a machine's CPUs at the peak that makes its busy share mean less
STORM = 4.0  # vfio interrupts per request above which the NIC interrupts more than once per packet
SILENT = 0.001  # vfio interrupts per request below which the host took next to none


def _number(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def cpu_of(samples: object, machine: str) -> tuple[float | None, float | None]:
    """A machine's busy percent without steal, and its steal, from a record's samples."""
    summary = samples.get(machine) if isinstance(samples, dict) else None
    cpu = summary.get("cpu", {}).get("cpu") if isinstance(summary, dict) and isinstance(summary.get("cpu"), dict) \
        else None
    if not isinstance(cpu, dict):
        return None, None
    return busy_share(cpu), _number(cpu.get("steal"))


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _columns(rows: list[list[float]]) -> list[float]:
    """Each position's mean over the rows as long as the first (a thread, over iterations)."""
    same = [row for row in rows if len(row) == len(rows[0])] if rows else []
    return [statistics.fmean(col) for col in zip(*same, strict=True)] if same else []


@dataclass
class Sides:
    """One point's figures from every side, iteration by iteration (each list gains one value per
    iteration that has it: records from before a figure existed simply lack it)."""

    steal: list[float] = field(default_factory=list)  # the server machine's, percent of the time
    clients: dict[str, list[float]] = field(default_factory=dict)  # each client machine's busy without steal
    client_steal: dict[str, list[float]] = field(default_factory=dict)
    threads: dict[str, list[list[float]]] = field(default_factory=dict)  # each client's generator threads
    vfio: list[float] = field(default_factory=list)  # interrupts/s the host took for the passed-through NICs
    vectors: list[int] = field(default_factory=list)  # their vfio vectors on the host
    devices: list[str] = field(default_factory=list)

    def add(self, record: dict[str, Any], server: str, clients: list[str]) -> None:
        samples = record.get("samples", {})
        _, steal = cpu_of(samples, server)
        if steal is not None:
            self.steal.append(steal)
        for machine in clients:
            if machine == server:
                continue  # their CPU use cannot be told apart (a warning says so)
            busy, stolen = cpu_of(samples, machine)
            if busy is not None:
                self.clients.setdefault(machine, []).append(busy)
            if stolen is not None:
                self.client_steal.setdefault(machine, []).append(stolen)
        detail = record.get("client", {}).get("clients_detail")
        for d in detail if isinstance(detail, list) else []:
            if not isinstance(d, dict):
                continue
            cpu = d.get("threads_cpu")
            shares = cpu.get("percent_of_one") if isinstance(cpu, dict) else None
            if isinstance(shares, list) and shares and all(_number(v) is not None for v in shares):
                self.threads.setdefault(str(d.get("machine", "?")), []).append([float(v) for v in shares])
        host = record.get("host", {})
        rates = host.get("vfio_interrupts_per_s") if isinstance(host, dict) else None
        if isinstance(rates, dict) and rates and all(_number(v) is not None for v in rates.values()):
            self.vfio.append(sum(float(v) for v in rates.values()))
            vectors = host.get("vfio_vectors")
            self.vectors.append(sum(int(v) for v in vectors.values() if _number(v) is not None)
                                if isinstance(vectors, dict) else -1)
            self.devices += [str(k) for k in rates if str(k) not in self.devices]

    def client_busy(self) -> dict[str, float]:
        return {m: statistics.fmean(v) for m, v in self.clients.items() if v}

    def thread_means(self) -> dict[str, list[float]]:
        return {label: means for label, rows in self.threads.items() if (means := _columns(rows))}

    def thread_max(self) -> float | None:
        return max((max(v) for v in self.thread_means().values()), default=None)


def _server(server_busy: float | None) -> str:
    if server_busy is None:
        return "(the server's CPU was not sampled)"
    if server_busy >= SATURATED:
        return f"while the server was {server_busy:.0f}% busy too: the result may be the client's"
    return f"while the server was {server_busy:.0f}% busy: this measures the client (seed 003)"


def _percents(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}%" for v in values)


def flags(s: Sides, peak: int, server_busy: float | None, rps: float) -> list[str]:
    """The warnings one point's sides give, each with its figure."""
    out = []
    at = f"at the peak ({peak} connections)"
    steal = _mean(s.steal)
    if steal is not None and steal >= STEAL:
        beside = "" if server_busy is None else f", beside {server_busy:.0f}% busy"
        out.append(f"steal: the server's CPUs were stolen {steal:.0f}% of the time {at}{beside}: its vCPUs waited "
                   "for the host's CPUs, so its idle time was not all room to spare; keep other work off the "
                   "vCPUs' CPUs")
    for machine, values in sorted(s.client_steal.items()):
        if values and (stolen := statistics.fmean(values)) >= STEAL:
            out.append(f"steal: client {machine}'s CPUs were stolen {stolen:.0f}% of the time {at}: the load it "
                       "generated was held back by its own host")
    for label, means in sorted(s.thread_means().items()):
        hot = [(n, v) for n, v in enumerate(means, 1) if v >= SATURATED]
        if len(hot) == 1:
            out.append(f"client-bound: wrk thread {hot[0][0]} on client {label} was {hot[0][1]:.0f}% of a core {at}, "
                       f"{_server(server_busy)}")
        elif hot:
            out.append(f"client-bound: wrk threads {', '.join(str(n) for n, _ in hot)} on client {label} were "
                       f"{_percents([v for _, v in hot])} of a core {at}, {_server(server_busy)}")
    for machine, busy in sorted(s.client_busy().items()):
        if busy >= SATURATED:
            out.append(f"client-bound: client {machine} was {busy:.0f}% busy {at}, {_server(server_busy)}")
    out += _vfio_flags(s, at, rps)
    return out


def _vfio_flags(s: Sides, at: str, rps: float) -> list[str]:
    rate = _mean(s.vfio)
    if rate is None or rps <= 0:
        return []
    per = rate / rps
    devices = ", ".join(s.devices)
    if per < SILENT:
        why = ("it has no vfio interrupt line on the host: its guest never enabled an interrupt (a polling driver, "
               "or the load went another way)" if s.vectors and max(s.vectors) == 0 else
               "its interrupts are posted straight to the vCPUs (VT-d posted interrupts: the best case), or the "
               "load did not go through it")
        return [f"vfio interrupts: the host took {rate:,.1f} per second from {devices} {at}, {per:.4f} per "
                f"request at {rps:,.0f} requests/s: {why}"]
    if per > STORM:
        return [f"interrupt storm? the host took {per:.1f} vfio interrupts per request from {devices} {at} "
                f"({rate:,.0f}/s at {rps:,.0f} requests/s), more than one for each packet a request and its answer "
                "need: the NIC's interrupt coalescing is off, or a line screams (ethtool -c in the guest, "
                "/proc/interrupts on the host)"]
    return []


def at_peak(s: Sides, server_busy: float | None, vcpus: list[float] | None, rps: float,
            waits: list[float] | None = None) -> dict[str, Any]:
    """Every side's figure at the peak, for the report's answer and its JSON (`waits`: the share of the
    time each vCPU thread waited for a host CPU)."""
    vfio = _mean(s.vfio)
    steal = _mean(s.steal)
    return {
        "server_busy_percent": None if server_busy is None else round(server_busy, 1),
        "server_steal_percent": None if steal is None else round(steal, 1),
        "vcpu_busy_percent": None if vcpus is None else [round(v, 1) for v in vcpus],
        "vcpu_wait_percent": None if waits is None else [round(v, 1) for v in waits],
        "vfio_interrupts_per_s": None if vfio is None else round(vfio, 1),
        "vfio_interrupts_per_request": None if vfio is None or rps <= 0 else round(vfio / rps, 4),
        "vfio_devices": s.devices,
        "client_busy_percent": {m: round(v, 1) for m, v in s.client_busy().items()},
        "client_threads_percent_of_one": {m: [round(v, 1) for v in vs] for m, vs in s.thread_means().items()},
    }


def line(figures: dict[str, Any], peak: int) -> str | None:
    """The figures of `at_peak` in one line; None when none was measured."""
    parts = []
    if figures["server_busy_percent"] is not None:
        steal = figures["server_steal_percent"]
        parts.append(f"the server {figures['server_busy_percent']:.0f}% busy"
                     + ("" if steal is None else f" and {steal:.1f}% stolen"))
    if figures["vcpu_busy_percent"]:
        waits = figures.get("vcpu_wait_percent")
        parts.append(f"its vCPU threads ran {_percents(figures['vcpu_busy_percent'])} of the time on the host"
                     + (f" and waited {_percents(waits)} for a CPU" if waits else ""))
    if figures["vfio_interrupts_per_s"] is not None:
        per = figures["vfio_interrupts_per_request"]
        parts.append(f"the host took {figures['vfio_interrupts_per_s']:,.0f} vfio interrupts/s"
                     + ("" if per is None else f" ({per:.3g} per request)"))
    parts += [f"client {m} {v:.0f}% busy" for m, v in figures["client_busy_percent"].items()]
    parts += [f"wrk threads on {m} {_percents(vs)} of a core" for m, vs in figures["client_threads_percent_of_one"]
              .items()]
    return f"at the peak ({peak} connections): {'; '.join(parts)}" if parts else None
