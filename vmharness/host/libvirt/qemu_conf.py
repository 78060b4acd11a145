"""qemu.conf's `hugetlbfs_mount`, which limits the hugetlbfs mounts libvirt's QEMU driver uses to those
it names, and when qemu.conf last changed (the driver reads it when its daemon starts). Parsed as
libvirt's config parser takes the value: a quoted path, or a bracketed list of them, with comments and
newlines inside the brackets; anything else is an error, since libvirt would not have started with it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.system.root import HostRoot

QEMU_CONF = "/etc/libvirt/qemu.conf"


@dataclass(frozen=True)
class Conf:
    """qemu.conf's hugetlbfs_mount (None: not set, every mount counts) and when the file last changed."""

    paths: tuple[str, ...] | None
    mtime: float


def parse_conf(text: str) -> tuple[str, ...] | None:
    """qemu.conf's hugetlbfs_mount: a path or a list of paths (None: not set). Anything else in the
    value is an error: libvirt would not have started with it either."""
    found: list[tuple[str, ...]] = []
    for m in re.finditer(r"^[ \t]*hugetlbfs_mount[ \t]*=[ \t]*", text, re.MULTILINE):
        found.append(_value(text[m.end():]))
    if len(found) > 1:
        raise HarnessError(f"{QEMU_CONF} sets hugetlbfs_mount {len(found)} times",
                           "keep one hugetlbfs_mount line: which one libvirt takes is not clear")
    return found[0] if found else None


_TOKEN = re.compile(r'\s+|#[^\n]*|"([^"\n]*)"|\'([^\'\n]*)\'|[\[\],]')


def _value(rest: str) -> tuple[str, ...]:
    """A quoted string on the line, or [ quoted strings separated by commas ], with comments and
    newlines inside the brackets as libvirt's config parser allows them."""
    tokens: list[str] = []
    pos = 0
    while pos < len(rest):
        m = _TOKEN.match(rest, pos)
        if m is None:
            break  # not a token: refused below
        pos = m.end()
        text = m.group(0)
        if text.isspace() or text[0] == "#":
            if "\n" in text and tokens[:1] != ["["]:
                break  # the line ended
            continue
        tokens.append(text)
        if tokens[0] != "[" or text == "]":
            break  # a string is whole; a list ends at its "]"
    quoted = [t[0] in "\"'" for t in tokens]
    inner = tokens[1:-1]
    if inner and inner[-1] == ",":
        inner = inner[:-1]  # a trailing comma
    is_list = tokens[:1] == ["["] and tokens[-1:] == ["]"] and len(tokens) > 1 and \
        all((t[0] in "\"'") == (i % 2 == 0) for i, t in enumerate(inner)) and (not inner or inner[-1] != ",")
    paths = tuple(t[1:-1] for t, q in zip(tokens, quoted, strict=True) if q)
    if (is_list or quoted == [True]) and all(p.startswith("/") for p in paths):
        return paths
    raise HarnessError(f"{QEMU_CONF}: hugetlbfs_mount is not a path or a list of paths ({rest[:40].strip()!r})",
                       'write it as hugetlbfs_mount = "/dev/hugepages" or ["/dev/hugepages", "/dev/hugepages1G"]')


def read_conf(root: HostRoot) -> Conf:
    try:
        mtime = os.stat(root.path(QEMU_CONF)).st_mtime
    except FileNotFoundError:
        return Conf(None, 0.0)
    except OSError as exc:
        raise HarnessError(f"cannot read {QEMU_CONF}: {exc.strerror}", "run as root (sudo)") from exc
    return Conf(parse_conf(root.read_optional(QEMU_CONF) or ""), mtime)
