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
    -no-reboot (a reboot ends it), so the reboot action is `reset` until QEMU has made this one (its
    RESET event), then `shutdown` again: QEMU 7.2 reads the action when it makes the reset, not when it
    is asked, and ended at once where the action was put back right after the request."""
    with _session(path, timeout) as qmp:
        qmp.execute("set-action", {"reboot": "reset"})
        qmp.execute("system_reset")
        qmp.await_event("RESET")
        qmp.execute("set-action", {"reboot": "shutdown"})
