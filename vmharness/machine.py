"""A machine the harness runs commands on: this one, or one reached with OpenSSH by a name from
~/.ssh/config. Everything that touches another machine goes through here."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from vmharness import proc

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
SSH_CONFIG_ENV = "VMHARNESS_SSH_CONFIG"  # an ssh config file to use instead of ~/.ssh/config


@dataclass(frozen=True)
class Machine:
    ssh: str | None = None  # an ssh destination ([user@]host or a Host from ~/.ssh/config); None: here
    options: tuple[str, ...] = ()  # more ssh options (a guest's key, say)
    name: str | None = None  # its name in records and file names, if not the ssh destination
    guest: bool = False  # a guest the harness booted: what runs in it ends with its domain
    patience: float = 1.0  # its commands may take this many times longer than usual (a guest under TCG)

    @property
    def local(self) -> bool:
        return self.ssh is None

    @property
    def label(self) -> str:
        return self.name or self.ssh or "this machine"

    @property
    def key(self) -> str:
        """A short name for files and records: its name, the ssh destination, or `local`."""
        return self.name or self.ssh or "local"

    def argv(self, argv: Sequence[str | Path]) -> list[str]:
        """The command line that runs argv on this machine; $VMHARNESS_SSH_CONFIG is ssh's -F."""
        args = [str(a) for a in argv]
        if self.ssh is None:
            return args
        config = os.environ.get(SSH_CONFIG_ENV)
        extra = ["-F", config] if config and "-F" not in self.options else []
        # ssh takes the first value it is given for an option: the machine's own come first
        return ["ssh", *extra, *self.options, *SSH_OPTIONS, self.ssh, "--", shlex.join(args)]

    def run(self, argv: Sequence[str | Path], *, timeout: float, check: bool = True,
            input: str | None = None) -> proc.Result:
        return proc.run(self.argv(argv), timeout=timeout * self.patience, check=check, input=input)


def for_uri(uri: str) -> Machine:
    """The machine a libvirt URI drives: `qemu+ssh://user@host/system` is `user@host`; a URI without
    a host (`qemu:///system`) is this one."""
    parts = urlsplit(uri)
    if not parts.hostname:
        return Machine()
    user = f"{parts.username}@" if parts.username else ""
    return Machine(f"{user}{parts.hostname}")


def _stat(machine: Machine, pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), None if there is none."""
    res = machine.run(["cat", f"/proc/{pid}/stat"], timeout=15, check=False)
    return res.stdout.rpartition(")")[2].split() if res.ok else None


def start_time(machine: Machine, pid: int) -> str | None:
    """The start time of a process (field 22 of its stat), to tell it from a later one with its PID."""
    fields = _stat(machine, pid)
    return fields[19] if fields else None


def alive(machine: Machine, pid: int) -> bool:
    """Running, and not a zombie waiting for a (slow) parent to reap it."""
    fields = _stat(machine, pid)
    return fields is not None and fields[0] not in ("Z", "X")


def stop_process(machine: Machine, pid: int, grace: float, started: str | None = None) -> None:
    """SIGTERM, then SIGKILL after `grace` s; nothing if the PID is gone or now names another process."""
    if started is not None and start_time(machine, pid) != started:
        return
    machine.run(["kill", "-TERM", str(pid)], timeout=15, check=False)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(machine, pid):
            return
        time.sleep(0.1)
    machine.run(["kill", "-KILL", str(pid)], timeout=15, check=False)
