"""A sampler's stream cut anywhere: at every byte of a real-shaped last snapshot (every section a
snapshot has: /proc/stat, net/dev, interrupts, softirqs, process lines) and at every field of the real
one, the parser gives the snapshots before it and no exception, and the harness does not wait for it
(`has_snapshot_after`). A complete snapshot that cannot be read, in the middle of the stream, is left out
and said once, naming the file and the snapshot (`make test` once failed in
test_a_full_disk_stops_the_sweep_cleanly on an IndexError from a short /proc/net/dev line)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from vmharness.bench import sampler
from vmharness.rundir import samples
from vmharness.rundir.store import RunDir

GOLDEN = Path(__file__).parent / "golden" / "sampler-2.txt"
_PROC = re.compile(r"^\d+ \(.*\) [A-Z] ", re.M)


def _last_start(text: str) -> int:
    return text.rindex("\n@t ") + 1


def _small_last(text: str, t: float) -> str:
    """The golden stream's last snapshot, retimed, with only its first few process lines: every other
    line whole (a cut at every byte of it stays cheap)."""
    lines = text[_last_start(text):].splitlines(keepends=True)
    procs = [i for i, line in enumerate(lines) if line[:1].isdigit() and " (" in line]
    kept = [line for i, line in enumerate(lines) if i not in procs[4:]]
    return f"@t {t}\n" + "".join(kept[1:])


def _check_cuts(text: str, cuts: set[int] | range, before: int, t: float, tmp: Path) -> None:
    """`text` cut at each of `cuts`: the `before` snapshots, and the last one if the cut left it whole;
    no damage reported; `has_snapshot_after(t)` only once the last one is whole. (The file is written
    once and cut shorter and shorter.)"""
    assert text.isascii()
    path = tmp / "s.txt"
    path.write_text(text)
    for cut in sorted(cuts, reverse=True):
        os.truncate(path, cut)
        damaged: list[tuple[int, str]] = []
        _, snaps = samples.parse(text[:cut], damaged)
        whole = text[:cut].endswith(("@end\n", "@end")) and cut > len(text) - 6
        assert len(snaps) == before + whole, cut
        assert damaged == [], (cut, damaged)
        assert samples.has_snapshot_after(path, t) == whole, cut


def test_a_real_shaped_last_snapshot_cut_at_every_byte(tmp_path: Path) -> None:
    text = GOLDEN.read_text()
    _, golden = samples.parse(text)
    t = golden[-1].t + 1
    first = _small_last(text, golden[0].t)
    stream = first + _small_last(text, t)
    last = stream[len(first):]
    assert all(section in last for section in ("cpu0 ", "Inter-|", "CPU0", "NET_RX")) and _PROC.search(last)
    _check_cuts(stream, range(len(first), len(stream) + 1), 1, t, tmp_path)
    _, snaps = samples.parse(stream)
    assert [s.t for s in snaps] == [golden[0].t, t] and snaps[-1].net and snaps[-1].procs and snaps[-1].softirq


def _shape(line: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[0-9]+", "9", line))


def test_the_real_last_snapshot_cut_at_every_field(tmp_path: Path) -> None:
    """The first line of each shape (digits and blanks aside: a cpu line, an interface's, an IRQ's, a
    process's...) cut at every field, every other line at its end; after a small complete snapshot."""
    text = GOLDEN.read_text()
    _, golden = samples.parse(text)
    stream = _small_last(text, golden[0].t) + text[_last_start(text):]
    start, cuts, shapes = stream.index("\n@t ") + 1, {len(stream)}, set()
    for m in re.finditer(r"[^\n]*\n", stream[start:]):
        at, line = start + m.start(), m.group()
        if _shape(line) not in shapes:
            shapes.add(_shape(line))
            cuts |= {at + i + d for i, c in enumerate(line) if c in " :\n" for d in (-1, 0, 1)}
        cuts |= {at + len(line) + d for d in (-2, -1, 0)}
    assert len(shapes) > 20 and len(cuts) > 1000
    _check_cuts(stream, cuts, 1, golden[-1].t, tmp_path)


def test_a_damaged_snapshot_in_the_middle_is_left_out_and_named(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    text = GOLDEN.read_text()
    _, golden = samples.parse(text)
    first, last = text[:_last_start(text)], text[_last_start(text):]
    middle = re.sub(r"^ *lo:.*$", "    lo: 2431", _small_last(text, golden[0].t + 0.5), count=1, flags=re.M)
    damaged: list[tuple[int, str]] = []
    _, snaps = samples.parse(first + middle + last, damaged)
    assert [s.t for s in snaps] == [s.t for s in golden]
    line = first.count("\n") + 1
    assert damaged == [(line, f"'@t {golden[0].t + 0.5}': /proc/net/dev line 'lo' has 1 of its 16 fields")]
    # the sweep's summary of a point over that stream: the snapshot left out, said once
    run = RunDir.create(tmp_path / "run", {"kind": "bench"})
    path = run.path / "samples" / "local-x.txt"
    path.write_text(first + middle + last)
    samplers = sampler.Samplers(run, 1.0, files={"local": path})
    with caplog.at_level(logging.WARNING, logger="vmharness.sampler"):
        for _ in range(2):
            got = samplers.summaries({"local": 0}, golden[0].t, golden[1].t, {})
            assert got["local"]["samples"] == 2
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"warning: {path}: a damaged snapshot is left out of the points' figures: {damaged[0][1]}"]


@pytest.mark.parametrize("head", ["@pid \n", "@pid x\n", "@pid \u0661\u0662x\n", "@t \n@end\n",
                                  "@t nan\ncpu 1 2\n@end\n", "@t 5\nInter-| x\n face |x\n  eth0: 1 2\n@end\n"])
def test_a_stream_damaged_at_its_start_gives_what_it_can(head: str) -> None:
    pid, snaps = samples.parse(head + GOLDEN.read_text().split("\n", 1)[1])
    assert len(snaps) == 2 and pid is None
    assert samples.parse("@pid 28") == (None, [])  # the PID's line cut short: no PID rather than another
