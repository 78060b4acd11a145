"""Who is logged in to a host: the user sessions utmp holds (/run/utmp, glibc's `struct utmp` of 384
bytes on x86-64), those whose process is still alive. A host boot (kexec) ends every one of them, so
a run says them before it asks for the reboot (experiment/hostboots/checks.py). Read through HostRoot,
so a snapshot or a test's fake root answers as the live host would."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from vmharness import textsafe
from vmharness.system.root import HostRoot

UTMP = ("run/utmp", "var/run/utmp")
_RECORD = struct.Struct("<hxxi32s4s32s256shhiii4i20s")  # glibc x86-64: 384 bytes
USER_PROCESS = 7
MAX_UTMP = 4 << 20  # bytes: about 10,000 records


@dataclass(frozen=True)
class Login:
    user: str
    line: str  # the terminal: pts/0, tty1
    host: str  # where from ("" for a local one)
    pid: int

    def __str__(self) -> str:
        return f"{self.user} on {self.line}" + (f" from {self.host}" if self.host else "") + f" (pid {self.pid})"


def _text(raw: bytes) -> str:
    return textsafe.line(raw.split(b"\0", 1)[0].decode(errors="replace"))


def parse(data: bytes) -> list[Login]:
    """The user sessions of a utmp file's bytes (a torn last record is left out)."""
    out = []
    for n in range(len(data) // _RECORD.size):
        kind, pid, line, _id, user, host, *_ = _RECORD.unpack_from(data, n * _RECORD.size)
        if kind == USER_PROCESS and pid > 0:
            out.append(Login(_text(user), _text(line), _text(host), pid))
    return out


def sessions(root: HostRoot) -> list[Login]:
    """The live user sessions of the host (a record whose process is gone is a stale one, left out)."""
    for path in UTMP:
        if root.exists(path):
            return [s for s in parse(root.read_bytes(path, limit=MAX_UTMP)) if root.exists(f"proc/{s.pid}")]
    return []
