"""host-check's rows for guest memory: the hugepage sizes and their free pages per node, the hugetlbfs
mounts, and libhugetlbfs' view of the pools (`hugeadm --pool-list`, parsed here) when it is installed."""

from __future__ import annotations

from dataclasses import dataclass

from vmharness.digits import is_digits
from vmharness.host.inspect import hugepages
from vmharness.host.inspect.hostcheck.facts import FAIL, PASS, SKIP, WARN, Check, Facts


def hugepage_sizes(f: Facts) -> Check:
    name = "hugepages"
    sizes = hugepages.sizes(f.root)
    if not sizes:
        return Check(name, FAIL, "no hugepage sizes in /sys/kernel/mm/hugepages",
                     "use a kernel with CONFIG_HUGETLBFS")
    parts = []
    for kib in sizes:
        per = [p for p in hugepages.per_node(f.root) if p.size_kib == kib]
        nodes = ", ".join(f"node{p.node} {p.free}/{p.total} free" for p in per)
        parts.append(f"{hugepages.size_label(kib)}: {nodes or 'no per-node data'}")
    if 1024 * 1024 not in sizes:
        return Check(name, WARN, "; ".join(parts) + " (no 1G pages)",
                     "1 GiB pages need the pdpe1gb CPU flag; 2 MiB pages work too")
    return Check(name, PASS, "; ".join(parts))


def hugetlbfs(f: Facts) -> Check:
    name = "hugetlbfs"
    found = hugepages.mounts(f.root)
    if not found:
        return Check(name, WARN, "not mounted", "host-prepare --hugepages mounts it")
    shown = ", ".join(
        f"{m.path} (pagesize {hugepages.size_label(m.pagesize_kib) if m.pagesize_kib else '?'})" for m in found
    )
    return Check(name, PASS, shown)


_POOL_HEADER = ["Size", "Minimum", "Current", "Maximum", "Default"]


@dataclass(frozen=True)
class Pool:
    """One row of `hugeadm --pool-list`: a page size and its pool, in pages."""

    size_kib: int
    minimum: int
    current: int
    maximum: int
    default: bool


def parse_pool_list(text: str) -> list[Pool]:
    """`hugeadm --pool-list` output: a header, then `SIZE_BYTES MIN CURRENT MAX [*]` per page size
    (`*` marks the default size). ValueError naming the line that does not fit."""
    lines = [(n, line.split()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines or lines[0][1] != _POOL_HEADER:
        raise ValueError(f"line 1 is not the header {' '.join(_POOL_HEADER)!r}")
    pools = []
    for n, cols in lines[1:]:
        numbers, star = (cols[:4], cols[4:])
        if len(numbers) != 4 or star not in ([], ["*"]) or not all(is_digits(c) and len(c) < 20 for c in numbers):
            raise ValueError(f"line {n} is not 'SIZE MINIMUM CURRENT MAXIMUM [*]': {' '.join(cols)[:60]!r}")
        size, low, now, high = (int(c) for c in numbers)
        if size < 1024 or size % 1024:
            raise ValueError(f"line {n}: {size} is not a page size in bytes")
        pools.append(Pool(size // 1024, low, now, high, star == ["*"]))
    return pools


def hugeadm_pools(f: Facts) -> Check:
    """libhugetlbfs' view of the pools, when its tool is installed: a second reading of the counters
    the hugepages row reads, in the form the libhugetlbfs documentation uses. Run on the live host
    (a snapshot stores what it printed)."""
    name = "hugeadm pools"
    data = f.live.get("hugeadm") if f.live is not None else None
    if not isinstance(data, dict):
        return Check(name, SKIP, "not run on a host root", "run host-check on the host itself")
    if not data.get("installed"):
        return Check(name, SKIP, "hugeadm is not installed (optional)",
                     "apt-get install libhugetlbfs-bin (dnf install libhugetlbfs-utils) for libhugetlbfs' view")
    output = data.get("pool_list")
    if not isinstance(output, str):
        return Check(name, WARN, str(data.get("error", "no output recorded"))[:300],
                     "run it by hand: hugeadm --pool-list")
    try:
        pools = parse_pool_list(output)
    except ValueError as exc:
        return Check(name, WARN, f"hugeadm --pool-list printed something unexpected: {exc}",
                     "run it by hand: hugeadm --pool-list")
    if not pools:
        return Check(name, WARN, "hugeadm lists no page sizes", "use a kernel with CONFIG_HUGETLBFS")
    shown = "; ".join(
        f"{hugepages.size_label(p.size_kib)}{' (default)' if p.default else ''}: minimum {p.minimum}, "
        f"current {p.current}, maximum {p.maximum}" for p in pools)
    return Check(name, PASS, shown)
