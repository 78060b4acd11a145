"""`python -m vmharness.cli ARGV`, each command in a process of its own, forked from a server that
imported the harness once (the CLI and the report's drawing). The hostile tables (tests/hostile_kit.py)
run about 400 commands that mostly end at their first check; a fresh interpreter spent most of each
one importing (0.6 s for `--help`, 2 s for a refused `report`, which imports matplotlib, on a quiet
2-core machine; three times that beside the rig's stream). Written here because multiprocessing's
forkserver, tried first, now and then lost a child's exit status when two threads started children
(exit code 255 for a command that had said its error and returned 2; 2 of 150 here), and it runs the
caller's main module again in each child.

What a child does is what `python -m vmharness.cli` does: `main()` with the words in `sys.argv`, so
with the command's own signal handling and escaped terminal; its exit status what `sys.exit(main())`
makes of the result; an exception that escapes printed with its traceback, status 1. It runs in the
case's working folder with the case's environment alone, stdin from /dev/null, stdout and stderr into
files the caller names; where the caller asks, with a /tmp and a /run/vmharness of its own
(tests/own_mounts.py). Unlike a fresh interpreter it does not wait for threads the command left
running (the harness leaves none). Each server serves one command at a time; `run` takes an idle one
or starts another, so two threads run two commands at once. tests/unit/test_forked_cli.py holds this
to a real `python -m vmharness.cli` on the same commands.

    python -m tests.forked_cli     # a server: one JSON request a line on stdin, one JSON answer on stdout
    python -m tests.forked_cli --listen PORT     # the rig's L1: one request per connection (below)

In the rig's L1 a fresh interpreter takes 8-13 s to start a command under TCG (`host-restore` with
nothing to do: 8 s; `--help`: 10 s), most of a rig test's time. There `listen` serves the harness's
commands on a loopback port, one request per connection, its answer the line `CODE HUNG`, so that
the client is bash alone (tests/rig/commands.py); several commands may run at once.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from vmharness.cli.main import GROUPS

REPO = Path(__file__).resolve().parents[1]
CLI = ("vmharness.cli.main", *(f"vmharness.cli.{group}" for group in GROUPS))  # what `listen` imports
PRELOAD = (*CLI, "vmharness.analysis.publish")  # what `serve` imports: also the report's drawing


def _child(req: dict[str, Any]) -> None:
    """In the forked child: the command, then the process's end with its status."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(os.devnull)  # noqa: SIM115 (the process ends without closing it, as any would)
        for fd, path in ((1, req["out"]), (2, req["err"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        if req.get("own") is not None:
            from tests import own_mounts

            own_mounts.enter(**req["own"])
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        import vmharness.cli
        from vmharness.cli.main import main

        sys.argv = [str(Path(vmharness.cli.__file__).with_name("__main__.py")), *req["argv"]]  # as -m sets it
        try:
            code = main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code & 0xFF)


def serve() -> None:
    """The server: the harness imported once, then a child forked for each request, waited for at most
    its timeout (killed through its pidfd, so never another process that got its PID)."""
    for name in PRELOAD:
        importlib.import_module(name)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        fd = os.pidfd_open(pid)
        ready, _, _ = select.select([fd], [], [], req["timeout"])
        if not ready:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status), "hung": not ready}), flush=True)


def listen(port: int) -> None:
    """The server of `--listen`: the CLI imported once (not the report's drawing), then for each
    connection a request line, a child forked for it and, when the child ends or its timeout has
    passed (it is then killed through its pidfd), the answer. One thread: a select over the listening
    socket and the children's pidfds; forking from a process with threads could copy a held lock."""
    for name in CLI:
        importlib.import_module(name)
    server = socket.create_server(("127.0.0.1", port))
    running: dict[int, tuple[int, socket.socket, float]] = {}  # pidfd -> (pid, connection, deadline)
    while True:
        now = time.monotonic()
        wait = min((deadline for _, _, deadline in running.values()), default=now + 3600) - now
        ready, _, _ = select.select([server.fileno(), *running], [], [], max(wait, 0))
        if server.fileno() in ready:
            conn, _ = server.accept()
            line = conn.makefile("r").readline()
            if not line:  # a client that only looked whether the server listens
                conn.close()
                continue
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                for held in (server, conn, *(c for _, c, _ in running.values())):
                    held.close()
                _child(req)
            running[os.pidfd_open(pid)] = (pid, conn, time.monotonic() + req["timeout"])
        for fd, (pid, conn, deadline) in list(running.items()):
            hung = fd not in ready and time.monotonic() >= deadline
            if hung:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            if fd in ready or hung:
                _, status = os.waitpid(pid, 0)
                os.close(fd)
                del running[fd]
                conn.sendall(f"{os.waitstatus_to_exitcode(status)} {int(hung)}\n".encode())
                conn.close()


class _Server:
    def __init__(self) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "tests.forked_cli"], cwd=REPO, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        answer = self.p.stdout.readline()
        if not answer:
            raise RuntimeError(f"the command server (pid {self.p.pid}) ended: {self.p.wait()}")
        got: dict[str, Any] = json.loads(answer)
        return got

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(timeout=30)


_idle: queue.SimpleQueue[_Server] = queue.SimpleQueue()
_all: list[_Server] = []


@atexit.register
def _close_all() -> None:
    for s in _all:
        s.close()


def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float,
        out: Path, err: Path, own: Mapping[str, object] | None = None) -> int | None:
    """The command's exit status (negative: the signal that killed it), or None if it ran longer than
    `timeout` seconds (it is killed). Its output is in `out` and `err`. `own`: the command's own /tmp
    and /run/vmharness (tests/own_mounts.py `Own.request()`), entered before it runs."""
    try:
        server = _idle.get_nowait()
    except queue.Empty:
        server = _Server()
        _all.append(server)
    try:
        got = server.ask({"argv": list(argv), "cwd": str(cwd), "env": dict(env), "timeout": timeout,
                          "out": str(out), "err": str(err), "own": None if own is None else dict(own)})
    finally:
        _idle.put(server)
    return None if got["hung"] else int(got["code"])


@overload
def call(argv: Sequence[str], cwd: Path | None = ..., env: Mapping[str, str] | None = ...,
         timeout: float = ..., *, text: Literal[True]) -> subprocess.CompletedProcess[str]: ...
@overload
def call(argv: Sequence[str], cwd: Path | None = ..., env: Mapping[str, str] | None = ...,
         timeout: float = ..., *, text: Literal[False] = ...) -> subprocess.CompletedProcess[bytes]: ...
def call(argv: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] | None = None,
         timeout: float = 60.0, *, text: bool = False) -> subprocess.CompletedProcess[Any]:
    """`run` for a test that wants the output back, as `subprocess.run([sys.executable, "-m",
    "vmharness.cli", *argv], capture_output=True, stdin=DEVNULL, text=text)` gives it (the caller's
    environment unless `env`, its working folder unless `cwd`), without an interpreter's imports per
    command; a command that outlives `timeout` is killed and raises TimeoutExpired, as there."""
    with tempfile.TemporaryDirectory(prefix="forked-cli-") as held:
        out, err = Path(held, "stdout"), Path(held, "stderr")
        code = run(argv, cwd or Path.cwd(), os.environ if env is None else env, timeout, out, err)
        said: tuple[Any, Any] = (out.read_bytes() if out.exists() else b"",  # not there: killed at once
                                 err.read_bytes() if err.exists() else b"")
    if text:
        said = said[0].decode(), said[1].decode()
    if code is None:
        raise subprocess.TimeoutExpired(["vmharness", *argv], timeout, *said)
    return subprocess.CompletedProcess(["vmharness", *argv], code, *said)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--listen"]:
        listen(int(sys.argv[2]))
    else:
        serve()
