"""Where tuning reads and writes: this host (through HostRoot, so a snapshot can be planned against),
another machine over ssh, or a guest through its agent. Each target also names itself in a form the
journal keeps, so `host-restore` can put values back after a crash."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from vmharness.errors import HarnessError
from vmharness.system import batched, machine, proc
from vmharness.system.machine import Machine
from vmharness.system.root import HostRoot


class Target(Protocol):
    label: str

    def read(self, path: str) -> str | None: ...
    def read_many(self, paths: list[str]) -> dict[str, batched.Answer]: ...
    # each (path, value) written in order, each answered None or the error its refusal is
    def write_many(self, pairs: list[tuple[str, str]]) -> list[HarnessError | None]: ...
    # each written, then what its file reads (or the error reading it is); the first refused write (an
    # error) or file not regular ends the list: the answers are of the writes made
    def set_many(self, pairs: list[tuple[str, str]]) -> list[batched.Answer]: ...
    def listdir(self, path: str) -> list[str]: ...
    def listdir_many(self, paths: list[str]) -> dict[str, list[str]]: ...  # each as listdir lists it
    def run(self, argv: list[str], check: bool = True) -> proc.Result: ...
    def spec(self) -> dict[str, Any]: ...


def _rejected(path: str, value: str, why: str) -> HarnessError:
    return HarnessError(f"the kernel rejected {value!r} for {path}: {why}",
                        "the value is out of range or in the wrong format for this kernel")


@dataclass
class HostTarget:
    root: HostRoot
    label: str = "host"

    def read(self, path: str) -> str | None:
        return self.root.read_optional(path)

    def read_many(self, paths: list[str]) -> dict[str, batched.Answer]:
        out: dict[str, batched.Answer] = {}
        for path in paths:
            try:
                out[path] = self.read(path)
            except HarnessError as exc:
                out[path] = exc
        return out

    def _write(self, path: str, value: str) -> HarnessError | None:
        """None, or why the write did not happen (HostRoot's refusal, or the kernel's)."""
        try:
            self.root.write_text(path, value)
        except HarnessError as exc:
            return exc
        except OSError as exc:
            return _rejected(path, value, exc.strerror or str(exc))
        return None

    def write_many(self, pairs: list[tuple[str, str]]) -> list[HarnessError | None]:
        return [self._write(path, value) for path, value in pairs]

    def set_many(self, pairs: list[tuple[str, str]]) -> list[batched.Answer]:
        out: list[batched.Answer] = []
        for path, value in pairs:
            got: batched.Answer = self._write(path, value)
            if got is None:
                try:
                    got = self.read(path)
                except HarnessError as exc:
                    got = exc
            out.append(got)
            if isinstance(got, HarnessError):
                break
        return out

    def listdir(self, path: str) -> list[str]:
        return self.root.listdir(path)

    def listdir_many(self, paths: list[str]) -> dict[str, list[str]]:
        return {path: self.listdir(path) for path in paths}

    def run(self, argv: list[str], check: bool = True) -> proc.Result:
        if not self.root.live:  # a snapshot: no programs to run; planning says what it cannot tell
            if check:
                raise HarnessError(f"cannot run {argv[0]} on a host root", "drop --host-root to act on this host")
            return proc.Result(tuple(argv), 127, "", "no commands run against a host root")
        return proc.run(argv, timeout=60, check=check)

    def spec(self) -> dict[str, Any]:
        return {"kind": "host"}


# Run on the target: irqbalance's PIDs, a line each. The shell's own `read` takes each comm: a `cat` per
# process costs a fork, some 10 ms under TCG, in a guest with a hundred processes.
IRQBALANCE_PIDS = ('for p in /proc/[0-9]*; do read -r c 2>/dev/null <"$p/comm" && [ "$c" = irqbalance ] '
                   '&& echo "${p#/proc/}"; done')

@dataclass
class ShellTarget:
    """A machine reached by a command runner: ssh (Machine) or the guest agent (see guest_target)."""

    label: str
    runner: Any  # callable(argv, check) -> proc.Result
    spec_data: dict[str, Any]

    def run(self, argv: list[str], check: bool = True) -> proc.Result:
        res: proc.Result = self.runner(argv, check)
        return res

    def read(self, path: str) -> str | None:
        return batched.read_with(lambda argv: self.run(argv, check=False), path, self.label)

    def read_many(self, paths: list[str]) -> dict[str, batched.Answer]:
        return batched.read_many(lambda argv: self.run(argv, check=False), paths, self.label)

    def _many(self, pairs: list[tuple[str, str]], read_back: bool) -> list[batched.Answer]:
        """One round trip for every write (and read back): a guest's tuning sets a dozen files."""
        got = batched.write_many(lambda argv: self.run(argv, check=False), pairs, self.label, read_back)
        return [_rejected(path, value, a.why) if isinstance(a, batched.Refused) else a
                for (path, value), a in zip(pairs, got, strict=False)]

    def write_many(self, pairs: list[tuple[str, str]]) -> list[HarnessError | None]:
        return [a if isinstance(a, HarnessError) else None for a in self._many(pairs, False)]

    def set_many(self, pairs: list[tuple[str, str]]) -> list[batched.Answer]:
        return self._many(pairs, True)

    def listdir(self, path: str) -> list[str]:
        return self.listdir_many([path])[path]

    def listdir_many(self, paths: list[str]) -> dict[str, list[str]]:
        return batched.list_many(lambda argv: self.run(argv, check=False), paths, self.label)

    def spec(self) -> dict[str, Any]:
        return self.spec_data


def ssh_target(name: str) -> ShellTarget:
    m = Machine(machine.check_destination(name, "a client tuning target"))

    def runner(argv: list[str], check: bool) -> proc.Result:
        return m.run(argv, timeout=60, check=check)

    return ShellTarget(f"client:{name}", runner, {"kind": "ssh", "ssh": name})


def guest_target(uri: str, uuid: str, name: str) -> ShellTarget:
    """A running guest, through its agent (no network needed)."""
    # libvirt's bindings (about 30 ms of CPU to import), only for a guest: `tune` on the host or a client
    # and every other command that imports this module go without them
    from vmharness.guest import agent
    from vmharness.host.libvirt import api

    def runner(argv: list[str], check: bool) -> proc.Result:
        conn = api.connect(uri)
        try:
            dom = api.lookup(conn, uuid)
            if dom is None or not dom.isActive():
                raise HarnessError(f"guest {name} is not running", "start it: vmharness vm up")
            result = agent.run(dom, argv, timeout=60)
        finally:
            conn.close()
        if check and not result.ok:
            raise result.failure(f"in guest {name}: ")
        return result

    return ShellTarget(f"guest:{name}", runner, {"kind": "guest", "uri": uri, "uuid": uuid, "name": name})


def from_spec(spec: dict[str, Any], root: HostRoot) -> Target | None:
    """The target a journal record names; None when it no longer exists (a guest that is gone took
    its settings with it)."""
    if spec["kind"] == "host":
        return HostTarget(root)
    if spec["kind"] == "ssh":
        return ssh_target(spec["ssh"])
    if spec["kind"] == "guest":
        from vmharness.host.libvirt import api  # libvirt's bindings, only for a guest: see guest_target

        conn = api.connect(spec["uri"])
        try:
            dom = api.lookup(conn, spec["uuid"])
            running = dom is not None and dom.isActive()
        finally:
            conn.close()
        return guest_target(spec["uri"], spec["uuid"], spec["name"]) if running else None
    raise HarnessError(f"unknown tuning target {spec!r} in the journal", "remove the record by hand")


@dataclass
class Prefetched:
    """A target whose first read of each of some files, and first listing of each of some folders, is
    answered from a batch (read_many, listdir_many): a plan reads a score of files, and over a guest's
    agent each read is a round trip of about 0.1 s. A file read again, or a folder listed again, is read
    or listed again."""

    t: Target
    known: dict[str, batched.Answer]
    listed: dict[str, list[str]] = field(default_factory=dict)
    label: str = field(init=False)

    def __post_init__(self) -> None:
        self.label = self.t.label

    def read(self, path: str) -> str | None:
        if path not in self.known:
            return self.t.read(path)
        got = self.known.pop(path)
        if isinstance(got, HarnessError):
            raise got
        return got

    def read_many(self, paths: list[str]) -> dict[str, batched.Answer]:
        return self.t.read_many(paths)

    def write_many(self, pairs: list[tuple[str, str]]) -> list[HarnessError | None]:
        for path, _ in pairs:
            self.known.pop(path, None)
        return self.t.write_many(pairs)

    def set_many(self, pairs: list[tuple[str, str]]) -> list[batched.Answer]:
        for path, _ in pairs:
            self.known.pop(path, None)
        return self.t.set_many(pairs)

    def listdir(self, path: str) -> list[str]:
        if path in self.listed:
            return self.listed.pop(path)
        return self.t.listdir(path)

    def listdir_many(self, paths: list[str]) -> dict[str, list[str]]:
        return self.t.listdir_many(paths)

    def run(self, argv: list[str], check: bool = True) -> proc.Result:
        return self.t.run(argv, check)

    def spec(self) -> dict[str, Any]:
        return self.t.spec()
