"""The server's system calls over one extra point (`[explain] syscalls`): counted by the kernel of the
machine that serves, in a histogram trigger on the raw_syscalls:sys_enter tracepoint keyed by process
and system call (the kernel's tracing, Documentation/trace/histogram.rst), so that nothing is copied to
user space per call and the count needs no tool in the guest. The trigger costs each call of every
process a little while it is on, so it is on only for that extra point, whose throughput the report
shows beside the uncounted one and never mixes into its statistics.

Written here rather than with perf (`perf stat -e raw_syscalls:sys_enter`): perf is not in the guest
image, and it would count every process alike where the question is the server's calls per request,
which the histogram's process key answers; bpftrace would need a compiler in the guest.

A load costs calls beyond its requests: each connection's accept and close, and the answers to the
requests wrk stopped waiting for when its load ended (about one per connection), which it never counts.
They weigh more the fewer requests a variant serves: counted over one load, the demo's capped control
read 17% more calls per request than the baseline, and pti 7.7%, on a slow machine where their calls
are the same. So a counted point is two loads at its count, a shorter one first, the server left to
answer each before the histogram is read (bench/explained.py): those calls are the same in both, and
the difference of the calls over the difference of the requests leaves them out. (Reading the
histogram twice inside one load instead needs a reader in the guest that keeps time while the load
holds its CPUs; one at a real-time priority read the baseline's calls 1.5 times too high under TCG.)

The histogram starts empty with the trigger, which is removed after the read; a guest is discarded
after its boot, so one the harness lost still leaves nothing on any machine it keeps."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vmharness.errors import HarnessError
from vmharness.system.machine import Machine

TRACING = "/sys/kernel/tracing"
EVENT = f"{TRACING}/events/raw_syscalls/sys_enter"
SPEC = "hist:keys=common_pid,id.syscall:vals=hitcount:size=8192"
# One argv, the trigger's text and its file as arguments: no value of a run's reaches the shell's text.
_WRITE = 'echo "$1" > "$2"'
_MOUNT = f'grep -q " {TRACING} tracefs " /proc/mounts || mount -t tracefs nodev {TRACING}'
_LINE = re.compile(r"\{\s*common_pid:\s*(\d+),\s*id:\s*(\S+)\s*\[\s*(\d+)\]\s*\}\s*hitcount:\s*(\d+)")
_TOTAL = re.compile(r"^\s*(Hits|Entries|Dropped):\s*(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Counts:
    """What the histogram held: calls by (process, system call), and its totals."""

    calls: dict[tuple[int, str], int]
    hits: int
    dropped: int  # calls the histogram had no room for: the counts are then a lower bound


def parse(text: str) -> Counts:
    """The histogram file's lines `{ common_pid: P, id: sys_NAME [ N] } hitcount: C` and its totals.
    A system call the kernel has no name for shows as its number."""
    calls: dict[tuple[int, str], int] = {}
    for pid, name, number, count in _LINE.findall(text):
        key = (int(pid), name.removeprefix("sys_") if name != "unknown_syscall" else f"#{int(number)}")
        calls[key] = calls.get(key, 0) + int(count)
    totals = {k: int(v) for k, v in _TOTAL.findall(text)}
    if "Hits" not in totals:
        raise ValueError("no 'Totals: Hits:' line: not a histogram's output")
    return Counts(calls, totals["Hits"], totals.get("Dropped", 0))


def tree(stat_lines: str, root: int) -> set[int]:
    """The process `root` and its descendants, from /proc/PID/stat lines (`PID (comm) S PPID ...`)."""
    parents: dict[int, int] = {}
    for line in stat_lines.splitlines():
        head, _, tail = line.rpartition(")")
        fields = tail.split()
        pid = head.split(" (", 1)[0].strip()
        if len(fields) >= 2 and pid.isdigit() and fields[1].isdigit():
            parents[int(pid)] = int(fields[1])
    found = {root}
    grew = True
    while grew:
        more = {p for p, pp in parents.items() if pp in found} - found
        found |= more
        grew = bool(more)
    return found


def of(counts: Counts, pids: set[int]) -> dict[str, int]:
    """The calls of the processes in `pids`, by system call, the most frequent first."""
    out: dict[str, int] = {}
    for (pid, name), n in counts.calls.items():
        if pid in pids:
            out[name] = out.get(name, 0) + n
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def start(m: Machine) -> None:
    """The trigger on, its histogram empty (one left by an interrupted point is removed first)."""
    m.run(["sh", "-c", _MOUNT], timeout=30)
    _set(m, f"!{SPEC}", check=False)
    _set(m, SPEC)


def read(m: Machine) -> Counts:
    """The histogram as it stands, the trigger left on."""
    try:
        return parse(m.run(["cat", f"{EVENT}/hist"], timeout=30).stdout)
    except ValueError as exc:
        raise HarnessError(f"the system call histogram on {m.label} could not be read: {exc}",
                           "is the kernel built with CONFIG_HIST_TRIGGERS? turn [explain] syscalls off") from exc


def between(first: Counts, second: Counts) -> Counts:
    """The calls counted from one read of a histogram to a later one."""
    calls = {k: n - first.calls.get(k, 0) for k, n in second.calls.items() if n > first.calls.get(k, 0)}
    return Counts(calls, second.hits - first.hits, second.dropped - first.dropped)


def per_request(r: dict[str, Any]) -> tuple[float, dict[str, float]] | None:
    """A counted point's server calls per request, and by call: the calls of its load less those of the
    shorter load before it, over the requests of the one less those of the other (what a load costs
    beyond its requests, the same in both, falls out); in a run recorded before the shorter loads, over
    its load's requests alone. None for a point that cannot say: a histogram that overflowed, or a
    longer load that served no more requests beyond the shorter one's than it has connections. Each load
    can end with a request on every connection that the server answered and the client did not count
    (or the other way round), so a difference that small may be all that blur: a clean clone's demo, a
    load held up under TCG, served 1,509 requests in 3 s after 1,503 in 1 s, and read 3.3 calls per request
    where its other boots read 7.0."""
    calls, requests = r["syscalls"], int(r["client"]["requests"])
    server, by_call = int(calls["server"]), {str(k): int(v) for k, v in calls["by_call"].items()}
    least = 0
    if (less := r.get("shorter")) is not None:
        requests -= int(less["requests"])
        server -= int(less["server"])
        fewer = {str(k): int(v) for k, v in less["by_call"].items()}
        by_call = {k: v - fewer.get(k, 0) for k, v in by_call.items()}
        least = int(r["connections"])
    if int(calls["dropped"]) > 0 or requests <= least:
        return None
    return server / requests, {k: v / requests for k, v in by_call.items()}

def stop(m: Machine) -> tuple[Counts, str]:
    """The histogram and every process's stat line, read together; then the trigger removed."""
    try:
        hist = m.run(["cat", f"{EVENT}/hist"], timeout=30).stdout
        stats = m.run(["sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null"], timeout=30, check=False).stdout
    finally:
        _set(m, f"!{SPEC}", check=False)
    try:
        return parse(hist), stats
    except ValueError as exc:
        raise HarnessError(f"the system call histogram on {m.label} could not be read: {exc}",
                           "is the kernel built with CONFIG_HIST_TRIGGERS? turn [explain] syscalls off") from exc


def _set(m: Machine, spec: str, check: bool = True) -> None:
    res = m.run(["sh", "-c", _WRITE, "sh", spec, f"{EVENT}/trigger"], timeout=30, check=False)
    if check and not res.ok:
        raise HarnessError(f"cannot count system calls on {m.label}: {res.stderr.strip() or 'the trigger was refused'}",
                           "the kernel needs tracefs and CONFIG_HIST_TRIGGERS; turn [explain] syscalls off")
