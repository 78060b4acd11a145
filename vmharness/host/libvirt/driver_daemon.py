"""The libvirt daemon that runs the QEMU driver (libvirtd, or virtqemud of the modular daemons), read
from /proc: the process /run/libvirt/qemu/driver.pid names (the QEMU driver's lock: one per host), else
the root processes of those names; when it started (/proc/PID/stat's start time), its command line and
its systemd unit, which say how to restart it."""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass

from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.system.root import HostRoot

DRIVER_PID = "/run/libvirt/qemu/driver.pid"
DAEMONS = ("libvirtd", "virtqemud")  # the monolithic daemon, and the modular one with the QEMU driver
_STARTTIME = 19  # /proc/PID/stat's 22nd field, counted after the ")" that ends the command name


@dataclass(frozen=True)
class Daemon:
    pid: int
    name: str
    started: float  # wall-clock seconds
    argv: tuple[str, ...]
    unit: str | None  # the systemd service it runs in, if any
    owned: bool = False  # started by vmharness.host.libvirt.daemon for this process

    @property
    def label(self) -> str:
        return f"{self.name} (pid {self.pid})"

    def restart(self) -> str:
        """The shell command that restarts it: its guests keep running (the driver finds them again)."""
        if self.unit:
            return f"systemctl restart {self.unit}"
        argv = list(self.argv) or [self.name]
        if not {"-d", "--daemon"} & set(argv[1:]):
            argv.append("-d")
        return (f"kill {self.pid} && while kill -0 {self.pid} 2>/dev/null; do sleep 0.2; done && "
                f"{shlex.join(argv)}")


def proc_field(root: HostRoot, pid: int, name: str) -> str | None:
    try:
        return root.read_optional(f"/proc/{pid}/{name}")
    except HarnessError:  # the process went away mid-read, or a field too large to be one of these
        return None


def _root_process(root: HostRoot, pid: int) -> bool:
    for line in (proc_field(root, pid, "status") or "").splitlines():
        if line.startswith("Uid:"):
            return line.split()[1:2] == ["0"]
    return False


def daemon_pids(root: HostRoot) -> list[int]:
    try:
        text = root.read_optional(DRIVER_PID)
    except HarnessError:  # not root: /proc tells the daemons all the same
        text = None
    if text is not None and is_digits(text) and proc_field(root, int(text), "comm") in DAEMONS:
        return [int(text)]
    return [int(p) for p in root.listdir("/proc")
            if is_digits(p) and proc_field(root, int(p), "comm") in DAEMONS and _root_process(root, int(p))]


def read_daemon(root: HostRoot, pid: int, boot: float, owned: int | None) -> Daemon | None:
    """The daemon with this PID; `boot`: the wall-clock time the kernel booted. None if it is gone."""
    stat = proc_field(root, pid, "stat")
    name = proc_field(root, pid, "comm")
    fields = (stat or "").rpartition(")")[2].split()
    if name is None or len(fields) <= _STARTTIME or not is_digits(fields[_STARTTIME]):
        return None
    started = boot + int(fields[_STARTTIME]) / os.sysconf("SC_CLK_TCK")
    argv = tuple(a for a in (proc_field(root, pid, "cmdline") or "").split("\0") if a)
    unit = None
    for line in (proc_field(root, pid, "cgroup") or "").splitlines():
        m = re.search(r"/([^/]+\.service)$", line)
        if m:
            unit = m.group(1)
    return Daemon(pid, name, started, argv, unit, owned == pid)


def boot_time() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
