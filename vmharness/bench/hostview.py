"""The host's side of a `run` point, beside what the guest says of itself: how much of the time each
vCPU thread actually ran (a guest counts as busy the time its vCPU waited for QEMU's I/O thread or
was preempted) and how much it waited for a host CPU that other work held (the kernel's schedstat:
the host's CPUs were contended, and what limited the guest was not its own work alone), under KVM
how many VM exits of each kind its vCPUs took (KVM's counters, through libvirt), and how many
interrupts the host took for the NICs passed through to it.

The vCPU threads' runtime is read from libvirt at the same two instants inside the load as the
client reads its generator's threads (vmharness/bench/threads.py), in a thread of the harness, so
that neither wrk's start-up nor its done() hook nor the ssh round trips dilute it; KVM's counters
right after each of those reads, so that they cover the same window. The interrupts come from the
host's own sampler (the same stream and window as every machine's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from vmharness.bench import threads
from vmharness.bench.sampler import Samplers

IDLE_SETTLE_S, IDLE_S = 1.5, 3.0  # the idle reading: after the samplers' first snapshot, over 3 s
Probe = Callable[[], list[float]]  # each vCPU thread's CPU seconds so far
Counters = Callable[[], dict[str, int]]  # KVM's counters of the guest's VM exits so far, by kind
# its vCPU threads' seconds waited for a CPU so far, and its QEMU's CPU seconds outside them (None: unknown)
Threads = Callable[[], tuple[list[float], float | None]]


class VcpuReader:
    """Reads `probe` (and `counters` and `qemu`, if given) at two instants after the load's release
    (`begin`); `result` stops waiting and gives the busy share between the readings (and the exits
    counted, the share waited and QEMU's CPU outside the vCPUs between them), or raises what a read
    raised (as a read in the harness's own thread would have)."""

    def __init__(self, probe: Probe | None, duration: float, counters: Counters | None = None,
                 qemu: Threads | None = None) -> None:
        self.probe = probe
        self.counters = counters
        self.qemu = qemu
        self.at = threads.instants(duration)
        self.readings: list[tuple[float, list[float]]] = []
        self.waited: list[list[float]] = []
        self.others: list[float | None] = []
        self.counts: list[dict[str, int]] = []
        self.error: Exception | None = None
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def begin(self, _start: float) -> None:
        if self.probe is None:
            return
        released = time.monotonic()
        self.thread = threading.Thread(target=self._read, args=(released,), name="vcpu-reader", daemon=True)
        self.thread.start()

    def _read(self, released: float) -> None:
        assert self.probe is not None
        due = released
        for wait in self.at:
            due += wait
            if self.stopped.wait(max(0.0, due - time.monotonic())):
                return
            try:
                before = time.monotonic()
                values = self.probe()
                at = (before + time.monotonic()) / 2
                if self.counters is not None:
                    self.counts.append(self.counters())
                if self.qemu is not None:
                    waited, others = self.qemu()
                    self.waited.append(waited)
                    self.others.append(others)
            except Exception as exc:  # handed to the harness's thread by result()
                self.error = exc
                return
            self.readings.append((at, values))

    def result(self) -> dict[str, Any]:
        """{"vcpu_busy_percent": [...], "window_s": ..., "vcpu_wait_percent": [...], "qemu_other_percent":
        ..., "kvm_exits": {kind: count}}, each of the last three only where it was read at both instants
        (and KVM counted something), or {} when two readings were not had."""
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        if self.error is not None:
            raise self.error
        busy = vcpu_busy(self.readings)
        exits = exit_deltas(self.counts) if busy and len(self.counts) == len(self.readings) else {}
        waited = shares([(t, w) for (t, _), w in zip(self.readings, self.waited, strict=True)]) \
            if busy and len(self.waited) == len(self.readings) else []
        if waited and len(waited) == len(busy["vcpu_busy_percent"]):
            busy = {**busy, "vcpu_wait_percent": waited}
        if busy and len(self.others) == len(self.readings) and all(o is not None for o in self.others):
            # exact to a clock tick (10 ms) of the process's time: a hair under 0 is none
            other = shares([(t, [o]) for (t, _), o in zip(self.readings, self.others, strict=True) if o is not None])
            busy = {**busy, "qemu_other_percent": max(0.0, other[0])} if other else busy
        return {**busy, "kvm_exits": exits} if exits else busy


def shares(readings: list[tuple[float, list[float]]]) -> list[float]:
    """Each thread's seconds (run, or waited for a CPU) between the first and the last reading (time,
    seconds per thread), as a percent of the time between them; [] without two matching readings."""
    if len(readings) < 2:
        return []
    (t0, a), (t1, b) = readings[0], readings[-1]
    if t1 <= t0 or len(a) != len(b) or not a:
        return []
    return [round(100 * (y - x) / (t1 - t0), 1) for x, y in zip(a, b, strict=True)]


def vcpu_busy(readings: list[tuple[float, list[float]]]) -> dict[str, Any]:
    """Each vCPU thread's busy percent between the first and last reading (time, CPU seconds), and the
    window's length; {} without two matching readings."""
    busy = shares(readings)
    return {"vcpu_busy_percent": busy, "window_s": round(readings[-1][0] - readings[0][0], 3)} if busy else {}


def exit_deltas(counts: list[dict[str, int]]) -> dict[str, int]:
    """Each kind's exits between the first and the last reading; {} when KVM counted none (a counter
    that went back, its guest's vCPUs reset, is left out)."""
    if len(counts) < 2 or not counts[0].get("exits"):
        return {}
    first, last = counts[0], counts[-1]
    return {k: last[k] - first[k] for k in sorted(last) if k in first and last[k] >= first[k]}


def vfio(summary: dict[str, Any], devices: tuple[str, ...]) -> dict[str, Any]:
    """The interrupts per second the host took for each of the run's passed-through `devices` (0 for
    one without a vfio line: its guest never enabled an interrupt) and their vector counts, from the
    host's sampler summary of the point; {} when nothing is passed through or the host was not
    sampled."""
    if not devices or "cpu" not in summary:
        return {}
    rates, vectors = summary.get("vfio_interrupts_per_s", {}), summary.get("vfio_vectors", {})
    return {"vfio_interrupts_per_s": {d: float(rates.get(d, 0.0)) for d in devices},
            "vfio_vectors": {d: int(vectors.get(d, 0)) for d in devices},
            "vfio_window": summary.get("window")}


def idle(probe: Probe, samplers: Samplers, key: str) -> dict[str, Any]:
    """The guest with no load, its samplers running, over IDLE_S after their start-up: its vCPU time
    on the host, which a cap does not shrink (docs/statistics.md, "The positive control"), and its
    kernel's events each second on machine `key` (timers, samplers, agent), left out of the events per
    request; {} without two readings."""
    time.sleep(IDLE_SETTLE_S)
    readings, since, start = [], samplers.offsets(), time.time()
    samplers.wake()
    first = samplers.woken
    for pause in (0.0, IDLE_S):
        time.sleep(pause)
        readings.append((time.monotonic(), probe()))
    busy = vcpu_busy(readings)
    if not busy:
        return {}
    end = time.time()
    samplers.wake()
    got = samplers.summaries(since, start, end, {}, (first, samplers.woken)).get(key)
    return {**busy, **({"samples": {key: got}} if got else {})}
