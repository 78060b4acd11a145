"""A machine the harness runs commands on: this one, or one reached with OpenSSH by a name from
~/.ssh/config. Everything that touches another machine goes through here, and so does every read of
a file on one (`read`): this host's files are read through HostRoot, another machine's by one small
script that refuses what is not a regular file and reads no more than HostRoot would.

An ssh destination is a value a user gave (a client host, a server host, a libvirt URI): one that
starts with `-` would be read by ssh as an option (`-oProxyCommand=...` runs a command here), so it is
refused, and `--` ends ssh's options before it all the same. The remote command runs under `env
LC_ALL=C`, as local ones do (proc), so that what is parsed reads the same everywhere.
"""

from __future__ import annotations

import re
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vmharness import environ
from vmharness.errors import HarnessError
from vmharness.model import libvirt_uri
from vmharness.system import proc
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


# Run on the machine: $1 the path, $2 the most bytes to print. Exit 3: missing; 4: not a regular file.
_READ = '[ -e "$1" ] || exit 3; [ -f "$1" ] || exit 4; exec head -c "$2" -- "$1"'

Runner = Callable[[list[str]], proc.Result]  # runs argv on a machine, check=False


def read_with(run: Runner, path: str, where: str, limit: int = MAX_READ) -> str | None:
    """A file's text stripped, read by a command runner (ssh, a guest's agent), as
    HostRoot.read_optional reads one here: None if it is missing or cannot be read; an error if it
    is not a regular file or holds more than `limit` bytes."""
    return answer(run(["sh", "-c", _READ, "sh", path, str(limit + 1)]), path, where, limit, "reading")


def answer(res: proc.Result, path: str, where: str, limit: int, doing: str) -> str | None:
    """What a command that ends by printing a file (_READ, or a write that reads it back) says of it:
    its text stripped; None if it is missing (exit 3) or the kernel refused it (1); an error if it is not
    a regular file (4), is larger than `limit`, or the command failed otherwise."""
    if res.returncode == 4:
        raise HarnessError(f"{path} on {where} is not a regular file: refusing to read it",
                           "the harness reads kernel attributes and small text files only")
    if res.returncode in (1, 3):  # missing, or refused by the kernel (head says why on stderr)
        return None
    if not res.ok:
        raise res.failure(f"{doing} {path} on {where}: ")
    if len(res.stdout.encode()) > limit:
        raise HarnessError(f"{path} on {where} is larger than {limit} bytes: refusing to read it",
                           "a kernel attribute is never this big")
    return res.stdout.strip()


# Run on the machine: $1 a marker, $2 the most bytes to print of each file, then the paths. Each file
# is "MARKER 3" (missing), "MARKER 4" (not a regular file) or "MARKER 0", its bytes, "MARKER end STATUS".
_READ_MANY = ('m=$1; n=$2; shift 2; for p; do if [ ! -e "$p" ]; then echo "$m 3"; elif [ ! -f "$p" ]; '
              'then echo "$m 4"; else echo "$m 0"; head -c "$n" -- "$p" 2>/dev/null; s=$?; echo; '
              'echo "$m end $s"; fi; done')


Answer = str | HarnessError | None  # a file's text, None (missing or unreadable), or the error reading it is


def read_many(run: Runner, paths: Sequence[str], where: str, limit: int = MAX_READ) -> dict[str, Answer]:
    """Several files in one command, each answered as read_with would answer it: its text, None, or the
    error read_with would raise (kept, to be raised when that file is read). One round trip in place of
    one per file: over a guest's agent each costs about 0.1 s."""
    if not paths:
        return {}
    mark = f"@vmh-{secrets.token_hex(8)}"
    res = run(["sh", "-c", _READ_MANY, "sh", mark, str(limit + 1), *paths])
    if not res.ok:
        raise res.failure(f"reading {len(paths)} files on {where}: ")
    out: dict[str, Answer] = {}
    rest = res.stdout
    for path in paths:
        head, _, rest = rest.partition("\n")
        out[path], rest = _framed(head, rest, mark, path, where, limit, f"reading {len(paths)} files")
    return out


def _framed(head: str, rest: str, mark: str, path: str, where: str, limit: int, doing: str) -> tuple[Answer, str]:
    """One file's answer in a batch's output, from its first line `head` ("MARK 3", "MARK 4" or "MARK 0"
    and the text up to "MARK end STATUS"), and what follows it."""
    if head == f"{mark} 3":
        return None, rest
    if head == f"{mark} 4":
        return HarnessError(f"{path} on {where} is not a regular file: refusing to read it",
                            "the harness reads kernel attributes and small text files only"), rest
    if head == f"{mark} 0" and (end := rest.find(f"\n{mark} end ")) >= 0:
        text, rest = rest[:end], rest[end + len(mark) + 6:]
        status, _, rest = rest.partition("\n")
        if len(text.encode()) > limit:
            return HarnessError(f"{path} on {where} is larger than {limit} bytes: refusing to read it",
                                "a kernel attribute is never this big"), rest
        return (text.strip() if status == "0" else None), rest
    raise HarnessError(f"{doing} on {where}: its answer for {path} is cut short",
                       "the machine's shell or its connection failed mid-way: try again")


# Run on the machine: $1 a marker, $2 the most bytes to print of each file read back, $3 `set` (each
# file read back after its write, as _READ_MANY frames it; the first write refused or file not regular
# ends the batch) or `write` (no read back: "MARKER ok"; a refusal does not end it), then pairs of value
# and path. Each pair begins "MARKER w"; a refused write prints what the shell said, then "MARKER 5".
_WRITE_MANY = ('m=$1; n=$2; mode=$3; shift 3; while [ $# -gt 1 ]; do echo "$m w"; '
               'if { printf "%s\\n" "$1" > "$2"; } 2>&1; then if [ "$mode" = write ]; then echo "$m ok"; '
               'elif [ ! -f "$2" ]; then echo "$m 4"; exit 0; else echo "$m 0"; head -c "$n" -- "$2" 2>/dev/null; '
               's=$?; echo; echo "$m end $s"; fi; else echo "$m 5"; [ "$mode" = write ] || exit 0; fi; '
               'shift 2; done')


@dataclass(frozen=True)
class Refused:
    """A write the machine refused, and what its shell said of it."""

    why: str


Written = Answer | Refused  # a file's answer read back after its write (None in `write` mode), or its refusal


def write_many(run: Runner, pairs: Sequence[tuple[str, str]], where: str, read_back: bool,
               limit: int = MAX_READ) -> list[Written]:
    """Several (path, value) writes in one command, in order, each value written with a newline. With
    `read_back`, each file is then answered as read_with answers it, and the batch ends at the first
    write refused or file that is not regular: the answers are of the writes made, the last maybe
    refused. Without, every write is tried, each answered None or its refusal. One round trip in
    place of one per file (over a guest's agent, some 0.2 s each under TCG)."""
    if not pairs:
        return []
    mark = f"@vmh-{secrets.token_hex(8)}"
    res = run(["sh", "-c", _WRITE_MANY, "sh", mark, str(limit + 1), "set" if read_back else "write",
               *(x for path, value in pairs for x in (value, path))])
    doing = f"writing {len(pairs)} files"
    if not res.ok:
        raise res.failure(f"{doing} on {where}: ")
    out: list[Written] = []
    rest = res.stdout
    for path, _ in pairs:
        if not rest:
            break
        head, _, rest = rest.partition("\n")
        said, _, rest = rest.partition("\n")
        told = []
        while said not in (f"{mark} ok", f"{mark} 5", f"{mark} 4", f"{mark} 0") and rest:
            told.append(said)
            said, _, rest = rest.partition("\n")
        if head != f"{mark} w" or said not in (f"{mark} ok", f"{mark} 5", f"{mark} 4", f"{mark} 0"):
            raise HarnessError(f"{doing} on {where}: its answer for {path} is cut short",
                               "the machine's shell or its connection failed mid-way: try again")
        if said == f"{mark} 5":
            out.append(Refused((told or ["write failed"])[-1].strip()))
        elif said == f"{mark} ok":
            out.append(None)
        else:
            got, rest = _framed(said, rest, mark, path, where, limit, doing)
            out.append(got)
    if len(out) < len(pairs) and not (read_back and out and isinstance(out[-1], Refused | HarnessError)):
        raise HarnessError(f"{doing} on {where}: its answer for {pairs[len(out)][0]} is cut short",
                           "the machine's shell or its connection failed mid-way: try again")
    return out


def read(machine: Machine, path: str, *, limit: int = MAX_READ, timeout: float = 15) -> str | None:
    """A file on a machine (see read_with); this one's through HostRoot (never a host-root tree:
    processes and files of a run live on the real machine)."""
    if machine.local:
        return HostRoot().read_optional(path, limit=limit)
    return read_with(lambda argv: machine.run(argv, timeout=timeout, check=False), path, machine.label, limit)


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
