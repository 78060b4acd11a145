"""tests/forked_cli.py against the real thing: the same commands run by `python -m vmharness.cli` in a
fresh interpreter and forked from the preloaded server end with the same status, stdout and stderr
(each in a working folder and environment of its own, stdin from /dev/null); `call`, which the tests
that read a command's output use, gives them as subprocess.run does."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import forked_cli
from tests.rig import commands
from vmharness.errors import HarnessError
from vmharness.system.proc import Result

COMMANDS = [
    ("--version",),
    ("--help",),
    ("report", "no-such-run"),  # refused: the run folder is missing
    ("bench", "--no-such-flag"),
    ("host-groups", "--json"),  # reads VMHARNESS_HOST_ROOT from the case's environment alone
    ("tune", "plan", "--profile", "/dev/stdin"),  # not a regular file (/dev/null in both), refused
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_a_forked_command_ends_as_the_interpreter_run_one_does(argv: tuple[str, ...], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_")}
    env["VMHARNESS_HOST_ROOT"] = str(tmp_path / "no-such-root")
    ran: list[tuple[int | None, str, str]] = []
    for how in ("interpreter", "forked"):
        cwd = tmp_path / how
        cwd.mkdir()
        if how == "interpreter":
            cp = subprocess.run([sys.executable, "-m", "vmharness.cli", *argv], cwd=cwd, env=env, timeout=60,
                                capture_output=True, text=True, stdin=subprocess.DEVNULL)
            ran.append((cp.returncode, cp.stdout, cp.stderr))
        else:
            cp = forked_cli.call(argv, cwd, env, 60, text=True)
            ran.append((cp.returncode, cp.stdout, cp.stderr))
    assert ran[0] == ran[1]
    assert ran[0][0] is not None and (ran[0][1] or ran[0][2])  # each said something


def test_a_command_that_outlives_its_time_is_killed(tmp_path: Path) -> None:
    """No time at all: the child cannot have parsed its words when the limit comes."""
    env = {"PATH": os.environ["PATH"]}
    assert forked_cli.run(("--help",), tmp_path, env, 0, tmp_path / "o", tmp_path / "e") is None
    with pytest.raises(subprocess.TimeoutExpired):
        forked_cli.call(("--help",), tmp_path, env, 0)


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[int]:
    """`python -m tests.forked_cli --listen PORT` on a free loopback port, stopped by its PID after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tests.forked_cli", "--listen", str(port)], cwd=forked_cli.REPO,
                              stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        probe_argv = ["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"]
        while subprocess.run(probe_argv, stderr=subprocess.DEVNULL).returncode:
            assert server.poll() is None and time.monotonic() < deadline, "the server did not listen"
            time.sleep(0.1)
        yield port
    finally:
        server.kill()
        server.wait()


def _listened(port: int, argv: tuple[str, ...], timeout: float, tmp: Path) -> Result:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_")}
    env["VMHARNESS_HOST_ROOT"] = str(tmp / "no-such-root")
    cp = subprocess.run(commands.client(port, argv, timeout, env, str(tmp)), capture_output=True, text=True,
                        timeout=timeout + 60)
    return commands.answer(argv, timeout, Result(tuple(cp.args), cp.returncode, cp.stdout, cp.stderr))


def test_the_rigs_listening_server_answers_as_the_interpreter_does(listening: int, tmp_path: Path) -> None:
    """The rig's client (bash alone) and `--listen`: each command ends as in a fresh interpreter, two at
    once included; a connection that only looked whether it listens leaves it serving; a command past its
    time is killed and said; the output files are removed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_")}
    env["VMHARNESS_HOST_ROOT"] = str(tmp_path / "no-such-root")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda argv: _listened(listening, argv, 60, tmp_path), COMMANDS[2:4]))
    for argv, res in zip(COMMANDS[2:4], got, strict=True):
        cp = subprocess.run([sys.executable, "-m", "vmharness.cli", *argv], cwd="/", env=env, timeout=60,
                            capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert (res.returncode, res.stdout, res.stderr) == (cp.returncode, cp.stdout, cp.stderr)
        assert res.returncode == 2 and res.stderr.startswith("error: ")
    assert _listened(listening, ("--version",), 60, tmp_path).stdout.startswith("vmharness ")
    with pytest.raises(HarnessError, match="did not finish within 0 s"):
        _listened(listening, ("--help",), 0, tmp_path)
    assert not list(tmp_path.glob("forked-*"))
