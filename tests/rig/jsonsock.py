"""Newline-delimited JSON over a unix socket, the framing shared by QMP and the guest agent."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError


class ReplyTimeoutError(HarnessError):
    """Nothing (complete) arrived before the deadline."""


class JsonSocket:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock: socket.socket | None = None
        self._buf = bytearray()

    def connect(self, timeout: float) -> None:
        """Connect, retrying while QEMU has not created the listening socket yet."""
        self.close()
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                sock.connect(str(self.path))
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                if time.monotonic() > deadline:
                    raise ReplyTimeoutError(f"could not connect to {self.path}: {exc}") from exc
                time.sleep(0.05)
                continue
            except OSError as exc:
                sock.close()
                raise HarnessError(f"could not connect to {self.path}: {exc}") from exc
            self._sock = sock
            return

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf.clear()

    def send(self, message: dict[str, Any], prefix: bytes = b"") -> None:
        sock = self._require()
        sock.settimeout(10.0)
        try:
            sock.sendall(prefix + json.dumps(message).encode() + b"\n")
        except TimeoutError as exc:
            raise ReplyTimeoutError(f"{self.path.name} accepted no data for 10 s") from exc
        except OSError as exc:
            raise HarnessError(f"writing to {self.path} failed: {exc}") from exc

    def receive(self, deadline: float) -> dict[str, Any]:
        """The next JSON object; lines that do not parse (a 0xFF delimiter, the tail of
        an earlier reader's partial message) are skipped."""
        sock = self._require()
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end]).strip(b"\xff \t\r")
                del self._buf[: end + 1]
                try:
                    message = json.loads(line) if line else None
                except ValueError:
                    message = None
                if isinstance(message, dict):
                    return message
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplyTimeoutError(f"no complete reply on {self.path.name} in time")
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError as exc:
                raise HarnessError(f"reading from {self.path} failed: {exc}") from exc
            if not chunk:
                raise HarnessError(f"{self.path} was closed by QEMU")
            self._buf += chunk

    def _require(self) -> socket.socket:
        if self._sock is None:
            raise HarnessError(f"not connected to {self.path}")
        return self._sock
