"""Where tuning reads and writes: this host (through HostRoot, so a snapshot can be planned against),
another machine over ssh, or a guest through its agent. Each target also names itself in a form the
journal keeps, so `host-restore` can put values back after a crash."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from vmharness.errors import HarnessError
from vmharness.system import machine, proc
from vmharness.system.machine import Machine
from vmharness.system.root import HostRoot


class Target(Protocol):
    label: str

    def read(self, path: str) -> str | None: ...
    def write(self, path: str, value: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
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

    def write(self, path: str, value: str) -> None:
        try:
            self.root.write_text(path, value)
        except OSError as exc:
            raise _rejected(path, value, exc.strerror or str(exc)) from exc

    def listdir(self, path: str) -> list[str]:
        return self.root.listdir(path)

    def run(self, argv: list[str], check: bool = True) -> proc.Result:
        if not self.root.live:  # a snapshot: no programs to run; planning says what it cannot tell
            if check:
                raise HarnessError(f"cannot run {argv[0]} on a host root", "drop --host-root to act on this host")
            return proc.Result(tuple(argv), 127, "", "no commands run against a host root")
        return proc.run(argv, timeout=60, check=check)

    def spec(self) -> dict[str, Any]:
        return {"kind": "host"}


# Run on the target: write $1 into $2.
_WRITE = 'printf "%s\\n" "$1" > "$2"'


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
        return machine.read_with(lambda argv: self.run(argv, check=False), path, self.label)

    def write(self, path: str, value: str) -> None:
        res = self.run(["sh", "-c", _WRITE, "sh", value, path], check=False)
        if not res.ok:
            raise _rejected(path, value, (res.stderr.strip().splitlines() or ["write failed"])[-1])

    def listdir(self, path: str) -> list[str]:
        res = self.run(["ls", "-1", path], check=False)
        return sorted(res.stdout.split()) if res.ok else []

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
