"""Files the harness makes on a machine (a guest's overlay, a client's wrk script): journaled, with
their owner, before they exist, and removed by path (never a pattern) when given back. The
journal's `file` op lives here, beside the one way to record one."""

from __future__ import annotations

from typing import Any

from vmharness.host import journal
from vmharness.host.journal import Op
from vmharness.host.root import HostRoot
from vmharness.machine import Machine


def made(root: HostRoot, machine: Machine, path: str, owner: str) -> int:
    """Journal that `path` on `machine` is about to be made for `owner`; returns the record's seq."""
    seq: int = journal.record(root, {"op": "file", "path": path, "ssh": machine.ssh}, owner)["seq"]
    return seq


def remove(machine: Machine, path: str) -> None:
    machine.run(["rm", "-f", "--", path], timeout=60)


def _describe(rec: dict[str, Any]) -> str:
    return f"remove {rec['path']}" + (f" on {rec['ssh']}" if rec.get("ssh") else "")


def _undo(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    remove(Machine(rec.get("ssh")), rec["path"])
    return []


journal.register("file", Op(_describe, _undo, ("path", "ssh")))
