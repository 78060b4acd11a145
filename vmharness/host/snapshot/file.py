"""Where a host-snapshot tarball goes: a file the user names, or stdout (`-`).

A file is written only where nothing is, or over a tarball an earlier host-snapshot wrote
(recognised by its first member: a folder or file of a tree laid out like `/`, with the time 0 and
no owner name, as `snapshot.write` makes every member). Anything else there (the user's own file, a
symlink, a file with other hard links, a FIFO) is refused unless `--force`; a folder always is. The
tarball is written as a new file and renamed over the name (vmharness/system/owned.py), so a link there is
replaced, never written through. It is never written inside the host root it describes.

`-` writes the tarball to stdout, for a pipe (`vmharness host-snapshot - | ssh lab 'cat > h.tar.gz'`)
or a redirection; a terminal is refused (a binary tarball would garble it), and the lines that say
what was done go to stderr, so that stdout holds the tarball alone.
"""

from __future__ import annotations

import os
import stat
import sys
import tarfile
import zlib
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.system import owned
from vmharness.system.root import HostRoot

STDOUT = "-"
_TOP = ("proc", "sys", "dev", "lib", "run", "etc", "usr", "var")  # what a snapshot's first member is under


def is_snapshot(path: Path) -> bool:
    """Whether the regular file at `path` (not followed if a link) starts as a host-snapshot does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    if head[:2] != b"\x1f\x8b":
        return False
    try:
        first = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, tarfile.BLOCKSIZE)
        info = tarfile.TarInfo.frombuf(first, "utf-8", "surrogateescape")
    except (zlib.error, tarfile.TarError, EOFError):
        return False
    return info.mtime == 0 and info.uname == "" and info.name.split("/")[0] in _TOP


def _refuse(out: Path, what: str, force: bool) -> HarnessError:
    return HarnessError(f"{out} {what}: refusing to replace it", "name a new file for the snapshot"
                        + ("; --force replaces it (never writing through a link)" if force else ""))


def check(root: HostRoot, out: Path, force: bool) -> None:
    """`out` can take the tarball (said before any work)."""
    if not root.live and (out.parent.resolve() / out.name).is_relative_to(root.base):
        raise HarnessError(f"refusing to write {out} inside host root {root.base}: a host root is read-only",
                           "write the snapshot somewhere else")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise HarnessError(f"cannot write {out}: {exc.strerror}", "choose a writable path") from exc
    if stat.S_ISDIR(st.st_mode):
        raise HarnessError(f"{out} exists and is not a regular file (a folder)", "name a new file for the snapshot")
    if force:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(out, "is a symlink", True)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(out, "exists and is not a regular file", True)
    if st.st_nlink > 1:
        raise _refuse(out, f"is a hard link (one of {st.st_nlink} names of one file)", True)
    if not is_snapshot(out):
        raise _refuse(out, "exists and is not a snapshot vmharness wrote", True)


def save(root: HostRoot, out: Path, data: bytes, force: bool = False) -> None:
    """Write the tarball to `out`: checked, then a new file renamed over the name."""
    check(root, out, force)
    try:
        owned.Folder(out.parent.resolve(), f"the folder of {out}", force=True).write(out.name, data)
    except OSError as exc:
        raise HarnessError(f"cannot write {out}: {exc.strerror}", "choose a writable path") from exc


def to_stdout(data: bytes) -> None:
    """Write the tarball to stdout, unless it is a terminal."""
    if sys.stdout.isatty():
        raise HarnessError("host-snapshot -: stdout is a terminal: refusing to write a binary tarball there",
                           "redirect it (vmharness host-snapshot - > host.tar.gz), or name a file")
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
