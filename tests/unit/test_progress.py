"""One output channel: results on stdout, progress on stderr; a bar with the time left on a terminal,
plain lines anywhere else. The two rendering cases run in a child process whose stderr is a real
pseudo-terminal or a pipe, as a user's shell or a log would give it."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from tests.unit.conftest import Cli
from vmharness import progress
from vmharness.system import proc

SOURCES = Path(__file__).resolve().parents[2]

# A run's shape: sessions, each measuring points, with lines said along the way; the result on stdout.
WORK = """
import sys, time
from vmharness import progress
with progress.Progress("guest sessions", 2) as sessions:
    for s in (1, 2):
        progress.say(f"[{s}/2] baseline, iteration 0: booting its guest")
        with progress.Progress("points measured", 2) as points:
            for p in (1, 2):
                time.sleep(0.3)
                progress.say(f"[{p}/2] baseline c=8 it=0: 1,234 req/s")
                points.advance()
        sessions.advance()
print(f"RESULT rich loaded: {'rich' in sys.modules}")
"""
LINES = [f"  [{s}/2] baseline, iteration 0: booting its guest\n" + "".join(
    f"  [{p}/2] baseline c=8 it=0: 1,234 req/s\n" for p in (1, 2)) for s in (1, 2)]
ENV = {"TERM": "xterm-256color", "COLUMNS": "110", "PYTHONPATH": str(SOURCES)}


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError as exc:  # EIO: every copy of the terminal's other end is closed
            if exc.errno != errno.EIO:
                raise
            return out
        if not chunk:
            return out
        out += chunk


def test_a_terminal_sees_a_bar_with_the_time_left_and_every_line() -> None:
    master, slave = os.openpty()
    try:
        child = proc.spawn([sys.executable, "-c", WORK], stdout=subprocess.PIPE, stderr=slave, env=ENV)
        os.close(slave)
        slave = -1
        screen = _read_all(master).decode(errors="replace")
        assert child.stdout is not None
        stdout = child.stdout.read().decode()
        assert child.wait(timeout=60) == 0, screen
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert stdout == "RESULT rich loaded: True\n", "stdout holds the result only"
    assert "\x1b[" in screen, "drawn with terminal control sequences"
    assert "guest sessions" in screen and "points measured" in screen
    # Each bar drawn at its count, with the time left: "1/2" alone would be found in the said lines
    # ("[1/2] baseline ..."), so the count is looked for in a bar, after its name and before its clock.
    # A bar is drawn again with each said line, so each count is on the screen whatever the machine's pace.
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)
    for name in ("guest sessions", "points measured"):
        for count in ("0/2", "1/2"):
            assert re.search(rf"{name} +\S+ {count} [0-9:]+ left ", plain), (name, count, plain)
    for line in ("[1/2] baseline, iteration 0: booting its guest", "[2/2] baseline c=8 it=0: 1,234 req/s"):
        assert line in screen, "the lines scroll above the bar"


def test_a_pipe_gets_plain_lines_and_no_bar() -> None:
    res = proc.run([sys.executable, "-c", WORK], timeout=60, env=ENV)
    assert res.stderr == "".join(LINES), "each line as it is, nothing else"
    assert res.stdout == "RESULT rich loaded: False\n", "rich is not even imported for a pipe"


def test_said_lines_go_to_stderr_never_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    progress.say("tuned guest")
    out, err = capsys.readouterr()
    assert (out, err) == ("", "  tuned guest\n")


def test_counted_work_keeps_its_count_without_a_terminal() -> None:
    with progress.Progress("points measured", 3) as bar:
        bar.advance()
        bar.grow(2)
        bar.advance(2)
    assert (bar.done, bar.total) == (3, 5)
    with progress.Progress("a boot", None) as unknown:
        unknown.grow(1)
    assert unknown.total == 1


def test_host_prepare_dry_run_json_prints_only_json(cli: Cli, host: FakeHost) -> None:
    host.pci("0000:b3:00.0", driver="mlx5_core", group=40, numa=0, netdevs=("ens1",))
    code, out, err = cli("host-prepare", "--dry-run", "--json", "--host-root", str(host.base), "--bdf", "b3:00.0")
    assert code == 0, err
    assert json.loads(out)["binds"][0]["bdf"] == "0000:b3:00.0"
    assert err == ""


def test_host_prepare_json_without_dry_run_is_refused_on_a_host_root_before_printing(cli: Cli,
                                                                                     host: FakeHost) -> None:
    host.pci("0000:b3:00.0", driver="mlx5_core", group=40, numa=0, netdevs=("ens1",))
    code, out, err = cli("host-prepare", "--json", "--host-root", str(host.base), "--bdf", "b3:00.0")
    assert (code, out) == (2, "")
    assert err.startswith("error: host-prepare changes the live host")


def test_no_command_module_keeps_its_own_output_function() -> None:
    for path in sorted((SOURCES / "vmharness").glob("cli*.py")):
        assert "def _say(" not in path.read_text(), f"{path.name}: use vmharness.progress.say"
