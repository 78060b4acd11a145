"""What tells a run folder's file from the one read before, without reading it again: RunDir keeps what it
parsed of its manifest and records while this is unchanged."""

from __future__ import annotations

import os
import stat
from pathlib import Path

TAIL = 4096  # bytes of the file's end that are part of its identity
Identity = tuple[tuple[int, ...], bytes]


def identity_of(path: Path) -> Identity | None:
    """What tells the file from the one read before, unread: inode, size, times and last 4 KiB (another
    writer's torn tail cut and a line of its length, in one clock tick); None for what cannot be read."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):  # a link or anything else: the read says what it is
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            tail = os.pread(fd, TAIL, max(0, st.st_size - TAIL))
        finally:
            os.close(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), tail
