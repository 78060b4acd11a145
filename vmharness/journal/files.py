"""Files the harness makes on a machine (a guest's overlay, a client's wrk script): journaled, with
their owner, before they exist, and removed by path (never a pattern) when given back. The
journal's `file` op lives here, beside the one way to record one.

The harness makes such files in two places only: a guest's overlay in its own folder under VM_DIR,
and a client's wrk script named for its run in /tmp (`wrk_script`). A journal is data that may have
been damaged or edited, so the undo removes a file only if its path is one of those (`ours`): a
record naming /etc/passwd, or any other path, is a problem host-restore names, and it is kept."""

from __future__ import annotations

import re
from typing import Any

from vmharness.journal import journal
from vmharness.journal.journal import Op
from vmharness.journal.kinds import OpKind
from vmharness.system.machine import Machine
from vmharness.system.root import HostRoot

VM_DIR = "/var/lib/vmharness/vms"  # a guest's overlay and console log, in VM_DIR/NAME/, on the VM's machine
_OURS = (re.compile(re.escape(VM_DIR) + r"/[A-Za-z0-9_][A-Za-z0-9._-]{0,62}/overlay\.qcow2"),
         re.compile(r"/tmp/vmharness-report-[A-Za-z0-9_][A-Za-z0-9._-]{0,63}-[0-9]{1,10}\.lua"))


def wrk_script(run_id: str, pid: int) -> str:
    """Where a client's report.lua goes for run `run_id`, put there by process `pid`."""
    return f"/tmp/vmharness-report-{run_id}-{pid}.lua"


def ours(path: object) -> bool:
    """Whether `path` is where the harness makes files: the only paths a `file` undo removes."""
    return isinstance(path, str) and any(p.fullmatch(path) for p in _OURS)


def made(root: HostRoot, machine: Machine, path: str, owner: str) -> int:
    """Journal that `path` on `machine` is about to be made for `owner`; returns the record's seq."""
    if not ours(path):
        raise RuntimeError(f"{path} is not where vmharness makes files: its undo would refuse it (files.ours)")
    seq: int = journal.record(root, {"op": OpKind.FILE, "path": path, "ssh": machine.ssh}, owner)["seq"]
    return seq


def remove(machine: Machine, path: str) -> None:
    machine.run(["rm", "-f", "--", path], timeout=60)


def _describe(rec: dict[str, Any]) -> str:
    return f"remove {rec['path']}" + (f" on {rec['ssh']}" if rec.get("ssh") else "")


def _kept(rec: dict[str, Any]) -> str | None:
    if ours(rec["path"]):
        return None
    return f"not a file vmharness makes (only {VM_DIR}/NAME/overlay.qcow2, /tmp/vmharness-report-*.lua)"


def _undo(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    if (why := _kept(rec)) is not None:  # never in restore.pending; checked again all the same
        return [why]
    remove(Machine(rec.get("ssh")), rec["path"])
    return []


journal.register(OpKind.FILE, Op(_describe, _undo, ("path", "ssh"), _kept))
