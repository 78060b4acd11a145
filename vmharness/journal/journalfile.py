"""The journal's file, below its records' meaning (journal.py): the last record's sequence number read
from the file's end alone, a torn last line cut off first, and the whole file replaced at once.

An append reads the file's last line, not the whole file: a journal of tens of thousands of records
(every IRQ of a multi-queue NIC, every knob of a tuning) would otherwise be parsed again for each record
added, as it was, the square of their count in all. The sequence numbers rise through the file (records
are appended in order, and a rewrite keeps their order and ends with the highest), so the last is the
highest. A replacement is written beside the file, fsynced, renamed over it and its folder fsynced: a
crash at any point leaves the old journal or the new one, each whole."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from vmharness.errors import HarnessError

MAX_LINE = 64 << 10  # bytes in one record: the largest the harness writes (an IRQ's CPU list on a host of
# 8,192 CPUs, every other one listed: 20 KiB; a reload's modules and parameters: some KiB) with room to spare
log = logging.getLogger("vmharness.journal")


def _damaged(shown: str, fault: str) -> HarnessError:
    return HarnessError(f"{shown} is damaged: {fault}", "look at it; host-restore cannot tell what to undo (move it "
                        "away once the host is put back by hand)")


def last_seq(fd: int, shown: str) -> int:
    """The sequence number of the last record in the journal open at `fd` (read and write), 0 when it is
    empty; a torn last line (a crash cut it mid-write: its change was never made) is cut off first, so
    that the next record does not bury it mid-file. `shown` names the file in errors."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    start = max(0, size - MAX_LINE - 1)
    tail = os.pread(fd, size - start, start)
    if not tail.endswith(b"\n"):
        cut = tail.rfind(b"\n")
        if cut < 0 and start > 0:
            raise _damaged(shown, f"its last line is over {MAX_LINE:,} bytes long, no record of the harness's")
        log.warning("%s: dropping a torn last line (a crash cut it mid-write): %r", shown, tail[cut + 1:][:80])
        os.ftruncate(fd, start + cut + 1)
        tail = tail[:cut + 1]
        if not tail:
            return 0
    begin = tail.rfind(b"\n", 0, len(tail) - 1)
    if begin < 0 and start > 0:
        raise _damaged(shown, f"its last line is over {MAX_LINE:,} bytes long, no record of the harness's")
    try:
        seq = json.loads(tail[begin + 1:])["seq"]
    except (ValueError, RecursionError, TypeError, KeyError):
        seq = None
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise _damaged(shown, "its last line is not a record with a seq number")
    return seq


def replace(path: Path, lines: list[str]) -> None:
    """Make the journal at `path` hold exactly `lines`, at once (see the module's note)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview("".join(f"{line}\n" for line in lines).encode())
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
