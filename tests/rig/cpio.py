"""A minimal writer for the cpio "newc" format the kernel unpacks as an initramfs.

Entries carry fixed owners and timestamps, so equal inputs give equal bytes."""

from __future__ import annotations

import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    name: str  # path inside the archive, without a leading "/"
    mode: int  # full st_mode: file type bits and permissions
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)  # (major, minor) for device nodes


def directory(name: str) -> Entry:
    return Entry(name, stat.S_IFDIR | 0o755)


def file(name: str, data: bytes, perm: int = 0o644) -> Entry:
    return Entry(name, stat.S_IFREG | perm, data)


def symlink(name: str, target: str) -> Entry:
    return Entry(name, stat.S_IFLNK | 0o777, target.encode())


def chardev(name: str, major: int, minor: int, perm: int = 0o600) -> Entry:
    return Entry(name, stat.S_IFCHR | perm, rdev=(major, minor))


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _record(ino: int, entry: Entry) -> bytes:
    name = entry.name.encode() + b"\0"
    fields = (
        ino,
        entry.mode,
        0,  # uid
        0,  # gid
        2 if stat.S_ISDIR(entry.mode) else 1,  # nlink
        0,  # mtime
        len(entry.data),
        0,  # devmajor
        0,  # devminor
        entry.rdev[0],
        entry.rdev[1],
        len(name),
        0,  # check
    )
    header = b"070701" + b"".join(b"%08X" % f for f in fields)
    head = header + name
    return head + _pad(len(head)) + entry.data + _pad(len(entry.data))


def archive(entries: list[Entry]) -> bytes:
    """The archive bytes (uncompressed). Parents must precede their children."""
    out = [_record(ino, e) for ino, e in enumerate(entries, start=1)]
    out.append(_record(0, Entry("TRAILER!!!", 0)))
    return b"".join(out)
