"""The real sampler loop on this machine (bash, cat, date): told a load has ended (`wake`), it takes its
next snapshot at once instead of an interval later, which is what a point's window waits for; with no
word it keeps its interval; its stdin gone, it sleeps its interval rather than spinning."""

from __future__ import annotations

import time
from pathlib import Path

from vmharness.bench import sampler
from vmharness.rundir import samples
from vmharness.rundir.store import RunDir
from vmharness.system.machine import Machine


def _times(path: Path) -> list[float]:
    return [s.t for s in samples.parse(path.read_text(errors="replace"))[1]]


def _wait_for(path: Path, n: int, limit: float) -> float:
    deadline = time.monotonic() + limit
    while len(_times(path)) < n:
        assert time.monotonic() < deadline, f"{len(_times(path))} snapshots, not {n}, within {limit} s"
        time.sleep(0.01)
    return time.monotonic()


def test_a_wake_takes_the_next_snapshot_now_and_a_closed_stdin_keeps_the_interval(tmp_path: Path) -> None:
    s = sampler.Samplers(RunDir.create(tmp_path / "run", {}), 30.0)  # an interval far longer than the test
    s.start([Machine()])
    try:
        (path,) = s.files.values()
        _wait_for(path, 1, 30)
        asked = time.monotonic()
        s.wake()
        took = _wait_for(path, 2, 25) - asked  # long before the 30 s interval
        s.wake()
        _wait_for(path, 3, 25)
        assert took < 25 and len(_times(path)) == 3
        # each answer names its wake, so that it is known for the one after a load's end whatever the
        # machine's clock says (here: an end far ahead of it)
        text = path.read_text()
        assert text.count("\n@wake ") == 2 and "\n@wake 1\n" in text and "\n@wake 2\n" in text
        assert [x.wake for x in samples.parse(text)[1]] == [None, 1, 2]
        assert samples.has_snapshot_after(path, time.time() + 3600, 2)
        assert not samples.has_snapshot_after(path, time.time() + 3600, 1)  # not the last one's
        time.sleep(1.0)
        assert len(_times(path)) == 3  # no word: the interval holds
        (p,) = s.popens
        assert p.stdin is not None
        p.stdin.write(b"1; reboot\n")  # not a number: a snapshot at once, but no word echoed
        p.stdin.flush()
        _wait_for(path, 4, 25)
        assert path.read_text().count("\n@wake ") == 2 and "reboot" not in path.read_text()
        p.stdin.close()  # end of input: read returns at once, and the loop sleeps its interval instead
        time.sleep(1.0)
        assert len(_times(path)) <= 5 and p.poll() is None
        print(f"a woken sampler's next snapshot came {took:.3f} s after the word")
    finally:
        s.stop()


def test_a_word_split_by_the_interval_is_read_whole(tmp_path: Path) -> None:
    """The interval runs out after the first digit of a wake has arrived (bash reads a pipe a byte at a
    time): the snapshot that answers it names the whole number, not its last digits."""
    s = sampler.Samplers(RunDir.create(tmp_path / "run", {}), 0.3)
    s.start([Machine()])
    try:
        (path,) = s.files.values()
        _wait_for(path, 1, 30)
        (p,) = s.popens
        assert p.stdin is not None
        p.stdin.write(b"1")
        p.stdin.flush()
        time.sleep(1.0)  # past the interval: its read times out holding "1"
        p.stdin.write(b"2\n")
        p.stdin.flush()
        deadline = time.monotonic() + 25
        while "\n@wake " not in path.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        _wait_for(path, len(_times(path)) + 1, 25)  # the answer complete
        wakes = [x.wake for x in samples.parse(path.read_text())[1] if x.wake is not None]
        assert wakes == [12]
    finally:
        s.stop()
