"""This machine's mounts, as /proc/mounts lists them: where each is and its type."""

from __future__ import annotations

import re

from vmharness.system.root import HostRoot


def _unescape(field: str) -> str:
    """A /proc/mounts field: the kernel writes a space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def table(root: HostRoot) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount, in the kernel's order."""
    out = []
    for line in (root.read_optional("/proc/mounts") or "").splitlines():
        fields = line.split()
        if len(fields) >= 3:
            out.append((_unescape(fields[1]), fields[2]))
    return out


def under(root: HostRoot, folder: str) -> list[str]:
    """The mount points at or below `folder` (a resolved path): a tree not to be removed while they hold,
    since a recursive removal would go on into each mounted filesystem (a chroot's /proc, /sys, /dev)."""
    top = folder.rstrip("/")
    return [point for point, _ in table(root) if point == top or point.startswith(top + "/")]
