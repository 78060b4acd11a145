"""Just enough QMP to ask QEMU to quit, or to reset L1 as someone else would."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.rig.jsonsock import JsonSocket
from vmharness.errors import HarnessError


class _Session:
    def __init__(self, sock: JsonSocket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def execute(self, name: str, arguments: dict[str, Any] | None = None) -> None:
        """Run `name`; HarnessError if QEMU refuses it (events that come meanwhile are passed over)."""
        self.sock.send({"execute": name, **({"arguments": arguments} if arguments else {})})
        while not {"return", "error"} & (reply := self.sock.receive(self.deadline)).keys():
            pass
        if "error" in reply:
            raise HarnessError(f"QMP {name}: {reply['error']}", "see QEMU's log in the rig's folder")

    def await_event(self, name: str) -> None:
        while self.sock.receive(self.deadline).get("event") != name:
            pass


@contextmanager
def _session(path: Path, timeout: float) -> Iterator[_Session]:
    """A QMP session past its greeting and capabilities; HarnessError once `timeout` has passed."""
    deadline = time.monotonic() + timeout
    sock = JsonSocket(path)
    sock.connect(timeout)
    try:
        while "QMP" not in sock.receive(deadline):
            pass
        session = _Session(sock, deadline)
        session.execute("qmp_capabilities")
        yield session
    finally:
        sock.close()


def quit_qemu(path: Path, timeout: float) -> None:
    with _session(path, timeout) as qmp:
        qmp.execute("quit")


def reset(path: Path, timeout: float) -> None:
    """Reset the machine, as a watchdog or someone at its console would. The rig runs QEMU with
    -no-reboot (a reboot ends it), so the reboot action is `reset` from here on, until `reboot_ends_qemu`
    is called once the machine has booted again: QEMU 7.2 ended instead of resetting where the action was
    put back right after the request, and once where it was put back at its RESET event (a clean clone of
    aecf8ba: L1's console showed no second boot), so the boot after the reset runs under `reset` whole."""
    with _session(path, timeout) as qmp:
        qmp.execute("set-action", {"reboot": "reset"})
        qmp.execute("system_reset")
        qmp.await_event("RESET")


def reboot_ends_qemu(path: Path, timeout: float) -> None:
    """The rig's own reboot action again: a reboot (a panic with panic=-1) ends QEMU."""
    with _session(path, timeout) as qmp:
        qmp.execute("set-action", {"reboot": "shutdown"})
