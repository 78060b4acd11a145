"""The libvirtd wrapper's command line (`python -m vmharness.host.libvirt.daemon CMD...`, what `make demo`
runs): no command, an option in its place or a program that does not exist ends with exit 2 and one
line, before any daemon is started, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h", "true"], ["/nonexistent/vmh-cmd", "run"], ["no-such-vmh-cmd"]],
                         ids=["none", "--help", "an option", "a missing path", "a missing program"])
def test_a_bad_command_is_one_line_and_exit_2(argv: list[str]) -> None:
    p = subprocess.run([sys.executable, "-m", "vmharness.host.libvirt.daemon", *argv], capture_output=True,
                       text=True, timeout=60)
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "usage:" in lines[0], p.stderr
    assert p.stdout == ""
    if argv and not argv[0].startswith("-"):
        assert repr(argv[0]) in lines[0]
