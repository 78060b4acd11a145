"""A machine the harness runs commands on: this one, or one reached with OpenSSH by a name from
~/.ssh/config. Everything that touches another machine goes through here, and so does every read of
a file on one (`read`): this host's files are read through HostRoot, another machine's by one small
script that refuses what is not a regular file and reads no more than HostRoot would (batched.py,
which also reads, lists and writes several in one command).

An ssh destination is a value a user gave (a client host, a server host, a libvirt URI): one that
starts with `-` would be read by ssh as an option (`-oProxyCommand=...` runs a command here), so it is
refused, and `--` ends ssh's options before it all the same. The remote command runs under `env
LC_ALL=C`, as local ones do (proc), so that what is parsed reads the same everywhere.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vmharness import environ
from vmharness.errors import HarnessError
from vmharness.model import libvirt_uri
from vmharness.system import batched, proc
from vmharness.system.root import HostRoot
from vmharness.userfile import MAX_READ

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
SSH_CONFIG_ENV = "VMHARNESS_SSH_CONFIG"  # an ssh config file to use instead of ~/.ssh/config
_BAD_DESTINATION = re.compile(r"^-|[\s\x00-\x1f\x7f]")


def check_destination(dest: str, where: str) -> str:
    """An ssh destination as given in `where` (a key, a flag), refused if ssh could take it for an
    option or it holds blanks or control characters; returned unchanged otherwise."""
    if not dest or _BAD_DESTINATION.search(dest):
        why = "is empty" if not dest else "starts with '-'" if dest.startswith("-") else \
            "holds a blank or a control character"
        raise HarnessError(f"ssh destination {dest!r} (from {where}) {why}",
                           "give a host name, user@host or a Host from ~/.ssh/config")
    return dest


@dataclass(frozen=True)
class Machine:
    ssh: str | None = None  # an ssh destination ([user@]host or a Host from ~/.ssh/config); None: here
    options: tuple[str, ...] = ()  # more ssh options (a guest's key, say)
    name: str | None = None  # its name in records and file names, if not the ssh destination
    guest: bool = False  # a guest the harness booted: what runs in it ends with its domain
    patience: float = 1.0  # its commands may take this many times longer than usual (a guest under TCG)

    def __post_init__(self) -> None:
        if self.ssh is not None:
            check_destination(self.ssh, f"machine {self.name}" if self.name else "a machine's address")

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
        config = environ.get(SSH_CONFIG_ENV)
        extra = ["-F", config] if config and "-F" not in self.options else []
        # ssh takes the first value it is given for an option: the machine's own come first
        return ["ssh", *extra, *self.options, *SSH_OPTIONS, "--", self.ssh, shlex.join(["env", "LC_ALL=C", *args])]

    def run(self, argv: Sequence[str | Path], *, timeout: float, check: bool = True,
            input: str | None = None) -> proc.Result:
        return proc.run(self.argv(argv), timeout=timeout * self.patience, check=check, input=input)


def for_uri(uri: str) -> Machine:
    """The machine a libvirt URI drives: `qemu+ssh://user@host/system` is `user@host`; a URI without
    a host (`qemu:///system`) is this one. The URI is checked first (vmharness.model.libvirt_uri): one that
    could run a program, or whose host ssh could read as an option, is refused."""
    parsed = libvirt_uri.parse(uri)
    dest = parsed.destination
    if dest is None:
        return Machine()
    check_destination(dest, f"the host of libvirt URI {uri}")
    return Machine(f"ssh://{dest}:{parsed.port}" if parsed.port else dest)


def read(machine: Machine, path: str, *, limit: int = MAX_READ, timeout: float = 15) -> str | None:
    """A file on a machine (see read_with); this one's through HostRoot (never a host-root tree:
    processes and files of a run live on the real machine)."""
    if machine.local:
        return HostRoot().read_optional(path, limit=limit)
    return batched.read_with(lambda argv: machine.run(argv, timeout=timeout, check=False), path, machine.label,
                             limit)


def _stat(machine: Machine, pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), None if there is none."""
    text = read(machine, f"/proc/{pid}/stat")
    return text.rpartition(")")[2].split() if text else None


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
