"""Give back what an earlier, crashed rig left: its QEMU process and its temp dir.

Each rig records its owner (PID and start time) in its temp dir before it starts QEMU,
and QEMU writes its own PID there. A dir whose owner is gone is a leftover; its QEMU
is killed only if that PID still runs a command line naming the dir."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
from pathlib import Path

from vmharness.system.machine import Machine, start_time

log = logging.getLogger("tests.rig.leftovers")

PREFIX = "vmharness-rig-"
OWNER = "owner"
QEMU_PID = "qemu.pid"


def new_dir() -> Path:
    # Made under a name reap() ignores, and renamed once the owner is on record.
    staging = Path(tempfile.mkdtemp(prefix="." + PREFIX))
    (staging / OWNER).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
    tmp = staging.with_name(staging.name[1:])
    staging.rename(tmp)
    return tmp


def reap() -> None:
    for tmp in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        if not tmp.is_dir() or _owner_alive(tmp):
            continue
        pid = _read_int(tmp / QEMU_PID)
        if pid is not None and str(tmp).encode() in _cmdline(pid):
            log.warning("killing QEMU %d left behind by a crashed rig in %s", pid, tmp)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


def _owner_alive(tmp: Path) -> bool:
    try:
        pid_text, start = (tmp / OWNER).read_text().split()
    except (OSError, ValueError):
        return False
    pid = int(pid_text)
    return _start_time(pid) == start


def _start_time(pid: int) -> str:
    return start_time(Machine(), pid) or "gone"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
