"""Hugepage sizes, reservations per NUMA node, and hugetlbfs mounts.

Counts are read as the kernel writes them; a value that is not one (a damaged snapshot) is an error
naming the file, never a traceback and never a guess."""

from __future__ import annotations

import re
from dataclasses import dataclass

from vmharness import digits
from vmharness.errors import HarnessError
from vmharness.system import sysfs
from vmharness.system.root import HostRoot

NODES = sysfs.NODES
GLOBAL = "/sys/kernel/mm/hugepages"


def size_label(kib: int) -> str:
    if kib % (1024 * 1024) == 0:
        return f"{kib // (1024 * 1024)}G"
    if kib % 1024 == 0:
        return f"{kib // 1024}M"
    return f"{kib}K"


def parse_size_kib(text: str) -> int | None:
    """`2M`, `1G`, `2048k`, `1048576kB` -> KiB."""
    m = re.fullmatch(r"([0-9]{1,15}) ?([kKmMgG])?[bB]?", text.strip(" \t\n"))
    if not m:
        return None
    value, unit = int(m.group(1)), (m.group(2) or "k").lower()
    return value * {"k": 1, "m": 1024, "g": 1024 * 1024}[unit]


@dataclass(frozen=True)
class NodePages:
    node: int
    size_kib: int
    total: int
    free: int


@dataclass(frozen=True)
class Mount:
    path: str
    pagesize_kib: int | None


def sizes(root: HostRoot) -> list[int]:
    out = []
    for d in root.listdir(GLOBAL):
        m = re.fullmatch(r"hugepages-([0-9]{1,15})kB", d)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def nodes(root: HostRoot) -> list[int]:
    return sorted(int(d[4:]) for d in root.listdir(NODES) if re.fullmatch(r"node[0-9]{1,4}", d))


def per_node(root: HostRoot) -> list[NodePages]:
    out = []
    for node in nodes(root):
        for kib in sizes(root):
            d = f"{NODES}/node{node}/hugepages/hugepages-{kib}kB"
            total = root.read_int(f"{d}/nr_hugepages", minimum=0)
            free = root.read_int(f"{d}/free_hugepages", minimum=0)
            if total is not None and free is not None:
                out.append(NodePages(node, kib, total, free))
    return out


def default_size_kib(root: HostRoot) -> int | None:
    for line in (root.read_optional("/proc/meminfo") or "").splitlines():
        if line.startswith("Hugepagesize:"):
            return parse_size_kib(line.split(":", 1)[1].replace(" ", ""))
    return None


def mounts(root: HostRoot) -> list[Mount]:
    out = []
    default = default_size_kib(root)
    for line in (root.read_optional("/proc/mounts") or "").splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[2] == "hugetlbfs":
            size = default
            for opt in cols[3].split(","):
                if opt.startswith("pagesize="):
                    size = parse_size_kib(opt.split("=", 1)[1])
            out.append(Mount(cols[1], size))
    return out


def node_memory_kib(root: HostRoot, node: int) -> tuple[int | None, int | None]:
    """MemTotal and MemFree of a NUMA node, from its meminfo ("Node 1 MemTotal:  1015808 kB")."""
    path = f"{NODES}/node{node}/meminfo"
    found: dict[str, int] = {}
    for line in (root.read_optional(path) or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("MemTotal:", "MemFree:"):
            if not digits.is_digits(parts[3]):
                raise HarnessError(f"{path} holds {line.strip()[:60]!r}: {parts[2][:-1]} is not a number of kB",
                                   "the host root is damaged, or this kernel writes something vmharness does not know")
            found[parts[2]] = int(parts[3])
    return found.get("MemTotal:"), found.get("MemFree:")
