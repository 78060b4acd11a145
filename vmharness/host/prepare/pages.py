"""Hugepages reserved on a node and the hugetlbfs they are mounted at: the change host-prepare makes,
and the journal's `pages` and `mount` ops that give them back."""

from __future__ import annotations

from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages
from vmharness.journal import journal
from vmharness.journal.journal import Op, Record
from vmharness.journal.kinds import OpKind
from vmharness.system import proc
from vmharness.system.root import HostRoot


def counter(node: int, size_kib: int) -> str:
    return f"{hugepages.NODES}/node{node}/hugepages/hugepages-{size_kib}kB/nr_hugepages"


def set_pages(root: HostRoot, node: int, size_kib: int, count: int) -> int:
    """Ask the kernel for `count` pages on the node; returns how many it really holds now."""
    root.write_text(counter(node, size_kib), str(count))
    now = root.read_int(counter(node, size_kib), minimum=0)
    if now is None:
        raise HarnessError(f"{counter(node, size_kib)} cannot be read back after writing it",
                           "check dmesg; the kernel may have removed the node or page size")
    return now


def _describe_pages(rec: Record) -> str:
    return f"node {rec['node']}: {hugepages.size_label(rec['size_kib'])} hugepages back to {rec['before']}"


def _undo_pages(root: HostRoot, rec: Record) -> list[str]:
    now = set_pages(root, rec["node"], rec["size_kib"], rec["before"])
    if now != rec["before"]:
        return [f"node {rec['node']} keeps {now} pages, not {rec['before']}: some are in use (a running guest?)"]
    return []


def _describe_mount(rec: Record) -> str:
    return f"unmount {rec['path']}" + (" and remove it" if rec.get("created") else "")


def _mounted(root: HostRoot, path: str) -> bool:
    return any(line.split()[1:2] == [path] for line in (root.read_optional("/proc/mounts") or "").splitlines())


def _undo_mount(root: HostRoot, rec: Record) -> list[str]:
    path = rec["path"]
    if _mounted(root, path):
        proc.run(["umount", str(root.writable(path, "unmount"))], timeout=30)
    if rec.get("created") and root.is_dir(path):
        root.rmdir(path)
    return []


journal.register(OpKind.PAGES, Op(_describe_pages, _undo_pages, ("node", "size_kib", "before"), types={
    "node": journal.is_int, "size_kib": lambda v: isinstance(v, int) and journal.is_int(v) and v > 0,
    "before": journal.is_int}))
journal.register(OpKind.MOUNT, Op(_describe_mount, _undo_mount, ("path", "created"), types={"path": journal.is_str}))
