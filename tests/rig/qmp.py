"""Just enough QMP to ask QEMU to quit."""

from __future__ import annotations

import time
from pathlib import Path

from tests.rig.jsonsock import JsonSocket


def quit_qemu(path: Path, timeout: float) -> None:
    """Send `quit`; raises HarnessError if QEMU does not take it within `timeout`."""
    deadline = time.monotonic() + timeout
    sock = JsonSocket(path)
    sock.connect(timeout)
    try:
        while "QMP" not in sock.receive(deadline):
            pass
        for command in ("qmp_capabilities", "quit"):
            sock.send({"execute": command})
            while not {"return", "error"} & sock.receive(deadline).keys():
                pass
    finally:
        sock.close()
