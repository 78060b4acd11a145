"""A small QEMU guest agent client: resynchronise, run commands, copy files in and out."""

from __future__ import annotations

import base64
import logging
import secrets
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.rig.jsonsock import JsonSocket, ReplyTimeoutError
from vmharness.errors import HarnessError
from vmharness.system.proc import Result

log = logging.getLogger("tests.rig.qga")

_CHUNK = 1 << 20  # bytes per guest-file-read/write


class AgentError(HarnessError):
    """The agent answered with an error, or did not answer in time."""


class AgentSilent(AgentError):
    """One request went unanswered for `waited` seconds (a command's own time running out is not this)."""

    def __init__(self, message: str, waited: float) -> None:
        super().__init__(message)
        self.waited = waited


SILENCE = 300.0  # seconds one request may go unanswered before the agent is given up for hung


class GuestAgent:
    def __init__(self, path: Path, silence: float = SILENCE) -> None:
        self._sock = JsonSocket(path)
        self._synced = False
        # A command may run for its whole timeout, and its status is polled all along; each poll is
        # answered at once by a live agent. Waiting the command's whole timeout for one poll's answer
        # held a quiet clean clone's nested run for 40 minutes with L1's agent silent, past the suite's
        # deadline: now the run ends after `silence` with that said.
        self._silence = silence

    def connect(self, timeout: float) -> None:
        self._sock.connect(timeout)
        self._synced = False

    def close(self) -> None:
        self._sock.close()
        self._synced = False

    def sync(self, timeout: float) -> None:
        """Align the stream: every reply before the one carrying our fresh random id is
        stale (an earlier sync, or a reply a timed-out caller never read)."""
        ident = secrets.randbelow(2**31 - 1) + 1
        deadline = time.monotonic() + timeout
        # A leading 0xFF makes the agent's JSON parser drop any partial input.
        request = {"execute": "guest-sync-delimited", "arguments": {"id": ident}}
        self._sock.send(request, b"\xff")
        try:
            while self._sock.receive(deadline).get("return") != ident:
                pass
        except ReplyTimeoutError as exc:
            raise AgentSilent(f"the guest agent did not answer guest-sync within {timeout:g} s", timeout) from exc
        self._synced = True

    def call(self, command: str, arguments: Mapping[str, object] | None = None, *, timeout: float) -> object:
        """Send one command and return its `return` value (any JSON value)."""
        deadline = time.monotonic() + timeout
        if not self._synced:
            self.sync(timeout)
        request: dict[str, object] = {"execute": command}
        if arguments:
            request["arguments"] = dict(arguments)
        self._sock.send(request)
        try:
            reply = self._sock.receive(deadline)
        except ReplyTimeoutError as exc:
            self._synced = False  # its late reply must not be taken for the next one's
            raise AgentSilent(f"the guest agent did not answer {command} within {timeout:g} s", timeout) from exc
        if "error" in reply:
            error = reply["error"]
            desc = error.get("desc", error) if isinstance(error, dict) else error
            raise AgentError(f"guest agent {command} failed: {desc}")
        return reply.get("return")

    def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        timeout: float,
        input: bytes | None = None,
        watch: Callable[[], None] | None = None,
    ) -> Result:
        """Run argv in the guest with exactly `env`; a process still running at the
        deadline is killed and AgentError is raised. `watch` is called at each look at the process, and
        what it raises ends the wait (the process is left to the caller)."""
        deadline = time.monotonic() + timeout
        arguments: dict[str, object] = {
            "path": argv[0],
            "arg": list(argv[1:]),
            "env": [f"{k}={v}" for k, v in env.items()],
            "capture-output": True,
        }
        if input is not None:
            arguments["input-data"] = base64.b64encode(input).decode()
        pid = int(self._call_map("guest-exec", arguments, timeout=min(timeout, self._silence))["pid"])
        pause = 0.01
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill(pid)
                raise AgentError(f"{shlex.join(argv)} did not finish within {timeout:g} s in L1")
            status = self._call_map("guest-exec-status", {"pid": pid}, timeout=max(min(remaining, self._silence), 1))
            if status.get("exited"):
                break
            if watch is not None:
                watch()
            time.sleep(min(pause, remaining))
            pause = min(pause * 1.5, 0.25)
        if status.get("out-truncated") or status.get("err-truncated"):
            log.warning("the guest agent truncated the output of %s", shlex.join(argv))
        code = int(status["exitcode"]) if "exitcode" in status else -int(status.get("signal", 0))
        out, err = _text(status.get("out-data")), _text(status.get("err-data"))
        return Result(tuple(argv), code, out, err)

    def write_file(self, path: str, data: bytes, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        handle = self._open(path, "wb", timeout)
        try:
            for start in range(0, max(len(data), 1), _CHUNK):
                chunk = base64.b64encode(data[start : start + _CHUNK]).decode()
                self.call(
                    "guest-file-write",
                    {"handle": handle, "buf-b64": chunk},
                    timeout=_left(deadline, path),
                )
        finally:
            self.call("guest-file-close", {"handle": handle}, timeout=10.0)

    def read_file(self, path: str, *, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        handle = self._open(path, "rb", timeout)
        parts: list[bytes] = []
        try:
            while True:
                got = self._call_map(
                    "guest-file-read",
                    {"handle": handle, "count": _CHUNK},
                    timeout=_left(deadline, path),
                )
                parts.append(base64.b64decode(got.get("buf-b64", "")))
                if got.get("eof") or not got.get("count"):
                    break
        finally:
            self.call("guest-file-close", {"handle": handle}, timeout=10.0)
        return b"".join(parts)

    def _open(self, path: str, mode: str, timeout: float) -> int:
        handle = self.call("guest-file-open", {"path": path, "mode": mode}, timeout=timeout)
        if not isinstance(handle, int):
            raise AgentError(f"guest-file-open {path} returned {handle!r}, not a handle")
        return handle

    def _call_map(self, command: str, arguments: Mapping[str, object], *, timeout: float) -> dict[str, Any]:
        reply = self.call(command, arguments, timeout=timeout)
        if not isinstance(reply, dict):
            raise AgentError(f"guest agent {command} returned {reply!r}, not an object")
        return reply

    def _kill(self, pid: int) -> None:
        try:
            self.call("guest-exec", {"path": "kill", "arg": ["-KILL", str(pid)]}, timeout=10.0)
        except HarnessError as exc:
            log.warning("could not kill guest pid %d: %s", pid, exc.message)


def _left(deadline: float, what: str) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise AgentError(f"copying {what} through the guest agent ran out of time")
    return remaining


def _text(b64: str | None) -> str:
    return base64.b64decode(b64).decode(errors="replace") if b64 else ""
