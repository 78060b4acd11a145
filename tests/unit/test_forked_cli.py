"""tests/forked_cli.py against the real thing: the same commands run by `python -m vmharness.cli` in a
fresh interpreter and forked from the preloaded server end with the same status, stdout and stderr
(each in a working folder and environment of its own, stdin from /dev/null); `call`, which the tests
that read a command's output use, gives them as subprocess.run does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forked_cli

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
