"""The journal of host changes: each change is recorded, fsynced, *before* it is made, with what was
there; `host-restore` undoes the records newest first. Undo steps are idempotent (they set the recorded
state, whatever the state is now), so a record whose change never happened — the process was killed
between the two — undoes to a no-op.

Lives in /run/vmharness/ (tmpfs): everything the harness changes on a host (driver bindings, runtime
hugepages, mounts, loaded modules) is also forgotten by the kernel at a reboot, so a journal that
survived one would describe state that no longer exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.host.root import HostRoot

STATE_DIR = "/run/vmharness"
JOURNAL = f"{STATE_DIR}/journal.jsonl"
LOCK = f"{STATE_DIR}/lock"
NOTHING_TO_UNDO = ("released", "begin")  # markers, not changes


def _state_dir(root: HostRoot) -> Path:
    path = root.path(STATE_DIR)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except PermissionError as exc:
        raise HarnessError(f"no permission to create {STATE_DIR}", "run as root (sudo)") from exc
    return path


@dataclass
class Lock:
    """One harness process changes the host at a time."""

    root: HostRoot
    fd: int = -1

    def __enter__(self) -> Lock:
        _state_dir(self.root)
        self.fd = os.open(self.root.path(LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise HarnessError(
                f"another vmharness process (pid {holder}) is changing this host",
                "wait for it to finish; if it is gone, the lock is released with it",
            ) from exc
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing releases the flock
            self.fd = -1


def read(root: HostRoot) -> list[dict[str, Any]]:
    """The records in order. A torn last line (a crash mid-write) is dropped: its change was not made."""
    text = root.read_optional(JOURNAL)
    if not text:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def record(root: HostRoot, entry: dict[str, Any]) -> dict[str, Any]:
    """Append one record and fsync it (and the directory, the first time) before returning."""
    path = _state_dir(root) / "journal.jsonl"
    new = not path.exists()
    entry = {"seq": len(read(root)) + 1, "time": round(time.time(), 3), **entry}
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return entry


def released(records: list[dict[str, Any]]) -> set[int]:
    """Sequence numbers given back already (a guest shut down by `vm down`, say)."""
    return {n for r in records if r.get("op") == "released" for n in r.get("seqs", [])}


def release(root: HostRoot, seqs: list[int]) -> None:
    """Mark records as given back; when nothing else is outstanding the journal goes."""
    record(root, {"op": "released", "seqs": seqs})
    records = read(root)
    done = released(records)
    if all(r["seq"] in done or r.get("op") in NOTHING_TO_UNDO for r in records):
        clear(root)


def clear(root: HostRoot) -> None:
    with contextlib.suppress(FileNotFoundError):
        root.path(JOURNAL).unlink()
