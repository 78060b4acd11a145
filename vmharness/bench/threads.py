"""Each load generator thread's share of a CPU over the time it measured: a client whose threads are
each near a whole core is measuring itself, whatever its machine's overall busy share says (wrk runs
one event loop per thread, so one thread at 100% caps its connections while the other cores idle).

The gate that starts the generator (vmharness/bench/clients.py) forks this reader in the background
just before it execs the generator: it sleeps to the first instant and prints /proc/uptime and every
thread's stat line in one `cat`, on stderr between markers, and again at the second instant. Both
sleeps start at the release, so a first reading that a busy machine made late does not make the second
late too. Both instants are planned inside the generator's measured time (`instants`): its start-up
before, its done() hook and the ssh teardown after, are left out. On a machine busy enough to wake the
reader after the load has ended, `shares` says so and gives no figure: the threads' start times and
the reading's instant are on one clock (the client's, from its boot), so the check needs no clock
shared with the harness. Two forks of sleep and two of cat per point, on the client only. The times
are in clock ticks (USER_HZ, 1/100 s), so over the window's W seconds a thread's share is known to
±1/W % (±1.25% for a 1 s load, ±0.04% for 30 s).
"""

from __future__ import annotations

from typing import Any

from vmharness.rundir.samples import USER_HZ, Proc, proc_line

MARK = "@vmh-threads"
END = "@vmh-threads-end"
# In the gate's shell after `read go`: $1 seconds from the release to the first reading, $2 from the
# release to the second ("- -": none). `$$` in the subshell is the gate's PID, which the generator keeps
# when the gate execs it.
PROBE = (f'if [ "$1" != - ]; then (r() {{ echo {MARK}; cat /proc/uptime /proc/$$/task/*/stat 2>/dev/null; '
         f'echo {END}; }}; sleep "$2" & s=$!; sleep "$1"; r; wait "$s"; r) >&2 & fi; shift 2')
TICK = 1.0 / USER_HZ  # the resolution of both /proc/uptime and a thread's start time
LEAD = 0.1  # of the duration kept clear at each end, between...
LEAD_MIN, LEAD_MAX = 0.05, 2.0  # ... these many seconds


def instants(duration: float) -> tuple[float, float]:
    """Seconds from the release to the first reading, and from it to the second: a tenth of the load
    at each end is left out (0.05 to 2 s), where the generator connects and where it stops."""
    lead = min(LEAD_MAX, max(LEAD_MIN, LEAD * duration))
    return lead, max(0.0, duration - 2 * lead)


def gate_args(duration: float) -> list[str]:
    """PROBE's two arguments for a load of `duration` seconds: each instant from the release."""
    lead, span = instants(duration)
    return [f"{lead:.3f}", f"{lead + span:.3f}"]


Reading = tuple[float, dict[int, Proc]]  # seconds from the client's boot, and each thread by its ID


def split(stderr: str) -> tuple[str, list[Reading]]:
    """The generator's own stderr, and the reader's readings in order. A reading cut short (the
    generator gone, or killed mid-read) or without its instant is dropped; a line of the generator's
    that came between the markers is given back to its stderr."""
    kept: list[str] = []
    readings: list[Reading] = []
    current: tuple[list[float], dict[int, Proc]] | None = None  # the instant (once read), the threads
    for line in stderr.splitlines():
        if line == MARK:
            current = ([], {})
            continue
        if line == END:
            if current is not None and current[0] and current[1]:
                readings.append((current[0][0], current[1]))
            current = None
            continue
        if current is not None and not current[0] and (up := _uptime(line)) is not None:
            current[0].append(up)
            continue
        parsed = proc_line(line) if current is not None else None
        if parsed is not None and current is not None:
            current[1][parsed[0]] = parsed[1]
        else:
            kept.append(line)
    return "".join(f"{line}\n" for line in kept), readings


def _uptime(line: str) -> float | None:
    """/proc/uptime's first figure: seconds since boot (its second, the CPUs' idle time, is left)."""
    fields = line.split()
    try:
        return float(fields[0]) if len(fields) == 2 and float(fields[1]) >= 0 else None
    except ValueError:
        return None


def shares(readings: list[Reading], pid: int, duration: float) -> dict[str, Any]:
    """Each worker thread's CPU, in percent of one CPU, between the first and the last reading, in
    thread ID order (wrk creates its workers in turn: wrk thread N is the Nth); the thread whose ID is
    the process's (wrk's main thread, which sleeps while its workers load) is given apart as
    `main_percent_of_one`. A `note` says why there is no figure where the readings do not both lie
    inside the load: fewer than two, out of order, the first before every worker had started, or the
    last after the workers had ended or after `duration` seconds from the first worker's start (the
    load's own start on the client's clock, which wrk's measured time begins just after)."""
    if len(readings) < 2:
        return {"note": f"{len(readings)} readings of the generator's threads inside its window (2 needed): "
                        "it ended or failed early"}
    (t0, a), (t1, b) = readings[0], readings[-1]
    seconds = t1 - t0
    if seconds <= 0:
        return {"note": f"the readings of the generator's threads are {seconds:g} s apart"}
    workers = sorted(tid for tid in a.keys() | b.keys() if tid != pid)
    if not workers or any(tid not in b or b[tid].started != a[tid].started for tid in workers if tid in a):
        return {"note": "the generator's worker threads had ended by its second reading: it came after the load"}
    if any(tid not in a for tid in workers):
        return {"note": "the generator's first reading came before all its worker threads had started"}
    late = t1 - (min(b[tid].started for tid in workers) * TICK + duration)
    if round(late, 3) > TICK:  # within both clocks' resolution, not past it
        return {"note": f"the second reading of the generator's threads came {late:.2f} s after its "
                        f"{duration:g} s load had ended (the client was busy)"}
    percent = {tid: round(100.0 * (b[tid].ticks - a[tid].ticks) / USER_HZ / seconds, 1)
               for tid in (*workers, pid) if tid in a and tid in b}
    return {"seconds": round(seconds, 3), "percent_of_one": [percent[tid] for tid in workers],
            "main_percent_of_one": percent.get(pid)}
