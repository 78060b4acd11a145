"""The load generator's threads, read by the gate's reader: each worker's share between two readings
of known answer, no figure (and a note saying why) where the readings do not both lie inside the load
or are damaged, and the gate itself, for real, on a spinning thread, with the clock its check rests on."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from vmharness.bench import clients, threads
from vmharness.system import proc

MAIN = 500  # the generator's PID: its main thread


def _reading(uptime: float, tasks: dict[int, tuple[int, int]]) -> str:
    """One reading as the reader prints it: /proc/uptime, then each thread's stat line, with its CPU
    ticks (utime) and its start time (ticks from boot)."""
    body = "".join(f"{tid} (wrk) R 1 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 3 0 {started} 100 10\n"
                   for tid, (ticks, started) in tasks.items())
    return f"{threads.MARK}\n{uptime:.2f} 4.00\n{body}{threads.END}\n"


def _load(first: float, second: float, duration: float, **changes: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """Main thread started at 90 s from boot, two workers at 99.5 s; read at `first` and `second`:
    worker 501 used 194 ticks between them, 502 100, the main thread none."""
    a = changes.get("a", {MAIN: (3, 9000), 501: (10, 9950), 502: (20, 9950)})
    b = changes.get("b", {MAIN: (3, 9000), 501: (204, 9950), 502: (120, 9950)})
    return threads.shares(threads.split(_reading(first, a) + _reading(second, b))[1], MAIN, duration)


def test_each_workers_share_between_two_readings_inside_the_load_with_the_main_thread_apart() -> None:
    err = "unable to connect?\n" + _reading(100.0, {MAIN: (3, 9000), 501: (10, 9950), 502: (20, 9950)}) \
        + _reading(102.0, {MAIN: (3, 9000), 501: (204, 9950), 502: (120, 9950)})
    kept, readings = threads.split(err)
    assert kept == "unable to connect?\n" and [t for t, _ in readings] == [100.0, 102.0]
    assert threads.shares(readings, MAIN, 3) == {"seconds": 2.0, "percent_of_one": [97.0, 50.0],
                                                 "main_percent_of_one": 0.0}
    assert threads.shares(readings, 999, 20)["percent_of_one"] == [0.0, 97.0, 50.0]  # no main thread seen


@pytest.mark.parametrize(("second", "duration", "late"), [
    (102.0, 2.5, None),  # the load ends at 99.5 + 2.5 = 102.0: the reading at its end is inside
    (102.01, 2.5, None),  # a clock tick over: both clocks count in ticks, so within their resolution
    (102.02, 2.5, "0.02 s after its 2.5 s load"),
    (102.0, 2, "0.50 s after its 2 s load had ended (the client was busy)"),  # a busy client's late reading
])
def test_a_second_reading_after_the_load_gives_no_figure(second: float, duration: float, late: str | None) -> None:
    got = _load(100.0, second, duration)
    if late is None:
        assert got["percent_of_one"][0] == pytest.approx(97.0, abs=1), got
    else:
        assert set(got) == {"note"} and late in got["note"], got


@pytest.mark.parametrize(("a", "b", "note"), [
    ({MAIN: (3, 9000), 501: (10, 9950)}, {MAIN: (3, 9000)}, "had ended by its second reading"),  # workers joined
    ({MAIN: (3, 9000)}, {MAIN: (3, 9000), 501: (10, 9950)}, "came before all its worker threads had started"),
    ({MAIN: (3, 9000), 501: (10, 9950)}, {MAIN: (3, 9000), 501: (10, 9950), 502: (0, 9951)}, "before all"),
    ({MAIN: (3, 9000), 501: (90, 9950)}, {MAIN: (3, 9000), 501: (10, 9990)}, "had ended"),  # its TID reused
    ({MAIN: (3, 9000)}, {MAIN: (9, 9000)}, "had ended"),  # a main thread alone is not a load
])
def test_readings_that_do_not_hold_the_same_workers_give_no_figure(a: dict[int, tuple[int, int]],
                                                                  b: dict[int, tuple[int, int]], note: str) -> None:
    got = _load(100.0, 102.0, 3, a=a, b=b)
    assert set(got) == {"note"} and note in got["note"], got


def _stat(tid: int, ticks: int) -> str:
    return f"{tid} (wrk) R 1 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 3 0 9950 100 10\n"


@pytest.mark.parametrize(("err", "note"), [
    ("", "0 readings"),
    (_reading(100.0, {501: (0, 9950)}), "1 readings"),
    (_reading(100.0, {501: (0, 9950)}) + f"{threads.MARK}\n102.00 4.00\n{_stat(501, 90)}", "1 readings"),  # cut short
    (_reading(100.0, {501: (0, 9950)}) + f"{threads.MARK}\n{_stat(501, 90)}{threads.END}\n",
     "1 readings"),  # no instant
    (_reading(100.0, {501: (0, 9950)}) + f"{threads.MARK}\nsoon 4.00\n{_stat(501, 90)}{threads.END}\n", "1 readings"),
    (_reading(102.0, {501: (0, 9950)}) + _reading(101.0, {501: (50, 9950)}), "-1 s apart"),
    (f"{threads.MARK}\n100.00 4.00\n{threads.END}\n{threads.MARK}\n102.00 4.00\n{threads.END}\n",
     "0 readings"),  # /proc/PID/task unreadable: the instants alone
])
def test_damaged_readings_give_a_note_not_a_figure(err: str, note: str) -> None:
    got = threads.shares(threads.split(err)[1], MAIN, 3)
    assert set(got) == {"note"} and note in got["note"], got


def test_the_generators_own_lines_between_the_markers_go_back_to_its_stderr() -> None:
    err = f"{threads.MARK}\n100.00 4.00\nwrk: a line of its own\n{_stat(501, 0)}12 34\n{threads.END}\n"
    kept, readings = threads.split(err)
    assert kept == "wrk: a line of its own\n12 34\n" and len(readings) == 1 and readings[0][0] == 100.0


def test_the_readings_are_planned_inside_the_load_and_clear_of_its_ends() -> None:
    assert threads.instants(1) == (0.1, 0.8)
    assert threads.instants(30) == (2.0, 26.0)
    assert threads.instants(0.2) == pytest.approx((0.05, 0.1))
    assert threads.gate_args(30) == ["2.000", "28.000"]  # each from the release


def test_the_gate_reads_a_spinning_thread_and_a_sleeping_one_for_real() -> None:
    """The gate as the clients run it, on this machine: the generator is a Python whose main thread
    sleeps in a read of its stdin while a second one spins until that read ends, which the test
    brings about only once the reader's two readings are in, so the worker spins all through the
    window however late a loaded machine makes it. What a loaded machine changes is how much of a
    CPU the spinning thread gets, so its share is checked against the sleeping one, not against a
    fixed half of a CPU. The clock the window check rests on is checked too: the readings' instants
    and the threads' start times are on the boot clock, and the second instant counts from the release."""
    spin = ("import sys, threading\n"
            "done = threading.Event()\n"
            "def spin():\n    while not done.is_set(): pass\n"
            "t = threading.Thread(target=spin); t.start(); sys.stdin.read(); done.set(); t.join()\n")
    p = proc.spawn(["sh", "-c", clients.GATE, "sh", "1.0", "2.0", sys.executable, "-S", "-c", spin],
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdin is not None and p.stderr is not None and p.stdout is not None
        assert p.stdout.readline() == f"ready {p.pid}\n".encode()
        released = time.clock_gettime(time.CLOCK_BOOTTIME)
        p.stdin.write(b"go\n")
        p.stdin.flush()
        err, ends = b"", 0
        while ends < 2:  # the reader's two readings, each ended by its marker line
            line = p.stderr.readline()
            assert line, err
            err, ends = err + line, ends + (line == f"{threads.END}\n".encode())
        p.stdin.close()
        assert p.wait(timeout=30) == 0
    finally:
        proc.stop(p, grace=1.0)
    kept, readings = threads.split(err.decode())
    assert kept == "" and len(readings) == 2
    (t0, _), (t1, b) = readings
    (worker,) = set(b) - {p.pid}
    started = b[worker].started * threads.TICK
    tick = threads.TICK
    assert released - tick <= started <= t0 and t0 >= released + 1.0 - tick and t1 >= released + 2.0 - tick
    got = threads.shares(readings, p.pid, 60)
    (share,) = got["percent_of_one"]
    # The worker ran whenever it was given a CPU, the main thread slept throughout: one clock tick
    # over the window is at most 1%; a loaded machine still gives the spinner a tenth of a CPU.
    assert share >= 10 and got["main_percent_of_one"] <= 2, got
    # the same readings, of a load said to end a tenth of a second before the second: no figure
    ended = t1 - started - 0.1
    assert "0.10 s after its" in threads.shares(readings, p.pid, ended)["note"]


def test_no_reader_runs_without_instants() -> None:
    p = proc.spawn(["sh", "-c", clients.GATE, "sh", "-", "-", "sh", "-c", "echo said >&2"],
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = p.communicate(b"go\n", timeout=30)
    assert err.decode() == "said\n"
