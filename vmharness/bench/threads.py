"""Each load generator thread's share of a CPU over the time it measured: a client whose threads are
each near a whole core is measuring itself, whatever its machine's overall busy share says (wrk runs
one event loop per thread, so one thread at 100% caps its connections while the other cores idle).

The gate that starts the generator (vmharness/bench/clients.py) forks this reader in the background
just before it execs the generator: it sleeps to the first instant, prints every thread's stat line
with the wall time, sleeps to the second, and prints them again, on stderr between markers. Both
instants lie inside the generator's measured time (`instants`): its start-up before, its done() hook
and the ssh teardown after, are left out. Two forks of cat and two of date per point, on the client
only; the samplers stay as they were. The times are in clock ticks (USER_HZ, 1/100 s), so over the
window's W seconds a thread's share is known to ±1/W % (±1.25% for a 1 s load, ±0.04% for 30 s).
"""

from __future__ import annotations

from typing import Any

from vmharness.rundir.samples import USER_HZ, proc_line

MARK = "@vmh-threads"
END = "@vmh-threads-end"
# In the gate's shell after `read go`: $1 seconds to the first reading, $2 from it to the second ("-":
# none). `$$` in the subshell is the gate's PID, which the generator keeps when the gate execs it.
PROBE = (f'if [ "$1" != - ]; then (r() {{ echo "{MARK} $(date +%s.%N)"; cat /proc/$$/task/*/stat 2>/dev/null; '
         f'echo "{END}"; }}; sleep "$1"; r; sleep "$2"; r) >&2 & fi; shift 2')
LEAD = 0.1  # of the duration kept clear at each end, between...
LEAD_MIN, LEAD_MAX = 0.05, 2.0  # ... these many seconds


def instants(duration: float) -> tuple[float, float]:
    """Seconds from the release to the first reading, and from it to the second: a tenth of the load
    at each end is left out (0.05 to 2 s), where the generator connects and where it stops."""
    lead = min(LEAD_MAX, max(LEAD_MIN, LEAD * duration))
    return lead, max(0.0, duration - 2 * lead)


def split(stderr: str) -> tuple[str, list[tuple[float, dict[int, int]]]]:
    """The generator's own stderr, and the reader's readings in order: (wall time, ticks by thread
    ID). A reading cut short (the generator gone, or killed mid-read) is dropped; a line of the
    generator's that came between the markers is given back to its stderr."""
    kept: list[str] = []
    readings: list[tuple[float, dict[int, int]]] = []
    current: tuple[float, dict[int, int]] | None = None
    for line in stderr.splitlines():
        if line.startswith(MARK + " "):
            try:
                current = (float(line[len(MARK) + 1:]), {})
            except ValueError:
                current = None
            continue
        if line == END:
            if current is not None and current[1]:
                readings.append(current)
            current = None
            continue
        parsed = proc_line(line) if current is not None else None
        if parsed is not None and current is not None:
            current[1][parsed[0]] = parsed[1].ticks
        else:
            kept.append(line)
    return "".join(f"{line}\n" for line in kept), readings


def shares(readings: list[tuple[float, dict[int, int]]], pid: int) -> dict[str, Any]:
    """Each thread's CPU, in percent of one CPU, between the first and the last reading. The thread
    whose ID is the process's (wrk's main thread, which sleeps while its workers load) is given apart
    as `main_percent_of_one`; the others, in thread ID order (wrk creates its workers in turn), are
    `percent_of_one`: wrk thread N is its Nth. A generator of one thread is its own worker. Without
    two readings, or with readings out of order, a `note` says why there is no figure."""
    if len(readings) < 2:
        return {"note": f"{len(readings)} readings of the generator's threads inside its window (2 needed): "
                        "it ended or failed early"}
    (t0, a), (t1, b) = readings[0], readings[-1]
    seconds = t1 - t0
    if seconds <= 0:
        return {"note": f"the readings of the generator's threads are {seconds:g} s apart"}
    both = sorted(tid for tid in set(a) & set(b) if b[tid] >= a[tid])
    if not both:
        return {"note": "no thread of the generator was seen in both readings"}
    percent = {tid: round(100.0 * (b[tid] - a[tid]) / USER_HZ / seconds, 1) for tid in both}
    workers = [percent[tid] for tid in both if tid != pid] or [percent[tid] for tid in both]
    return {"seconds": round(seconds, 3), "percent_of_one": workers, "main_percent_of_one": percent.get(pid)}
