"""Escape sequences byte for byte (vmharness/textsafe.py): a run folder full of them (instance names, a
session's error, a record's key), run folder names, values echoed in errors, a host tree's driver and
interface names. Nothing raw reaches stdout, stderr or any of the report's files: no ESC, BEL,
backspace, C1 CSI, nor a CR but the one of CSV's CR LF (which ends a line and hides nothing); a newline
in a name cannot add a line. Its commands write only into their working folder and $TMPDIR, the test's own."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import forked_cli
from tests.fakehost import FakeHost
from tests.hostile_kit import CX5, GOOD_RECORDS, MLX, a_run_dir
from tests.unit.test_hostile_records import ESC, _named, manifest, point

# byte for byte: nothing raw in any output, nor in the report's files (but the CR of CSV's CR LF, which ends
# a line and hides nothing)
BAD_BYTES = (b"\x1b", b"\r", b"\x07", b"\x08", b"\xc2\x9b")


def _raw(data: bytes) -> bool:
    return any(b in data.replace(b"\r\n", b"\n") for b in BAD_BYTES)


def _bytes_run(cwd: Path, *argv: str) -> tuple[int, bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_")}
    cp = forked_cli.call(argv, cwd, env, timeout=120)
    out = cp.stdout + cp.stderr
    assert b"Traceback" not in out, out.decode(errors="replace")
    return cp.returncode, out


def _escaped_run(cwd: Path) -> None:
    """A run folder full of escape sequences: instance names, a session's error, a record's key."""
    names = (f"a{ESC}", f"b\x1b]0;title\x07{ESC}")
    _named(names, ({"kind": "session", "instance": names[0], "iteration": 1, "ok": False, "error": f"x{ESC}"},
                   point(f"c{ESC}", 2, 0, rps=-1.0)))(cwd)


@pytest.mark.parametrize(("form", "exit_code"), [
    ((), 0), (("--format", "markdown"), 0), (("--format", "csv"), 0), (("--json",), 0),
    (("--strict",), 2),  # the record with a negative rate: an error under --strict, a warning otherwise
    (("--baseline", f"b{ESC}"), 2),  # not an instance of the run
], ids=str)
def test_no_escape_reaches_the_terminal_raw(tmp_path: Path, form: tuple[str, ...], exit_code: int) -> None:
    _escaped_run(tmp_path)
    code, out = _bytes_run(tmp_path, "report", "rd", *form)
    assert code == exit_code and not _raw(out), out
    shown = b"\\u001b" if form == ("--json",) else b"\\x1b"  # JSON's escape, or the text forms'
    assert shown in out, out


def test_no_escape_reaches_a_report_file_raw(tmp_path: Path) -> None:
    _escaped_run(tmp_path)
    code, out = _bytes_run(tmp_path, "report", "rd", "--out", "out")
    assert code == 0 and not _raw(out), out
    files = sorted((tmp_path / "out").iterdir())
    assert {".txt", ".md", ".csv", ".json", ".html", ".svg", ".png"} <= {f.suffix for f in files}
    for f in files:
        if f.suffix not in (".png", ".pdf"):  # compressed: a figure's text is the SVG's
            data = f.read_bytes()
            assert not _raw(data), f.name
    assert b"a\\x1b[2J\\x0d\\x07\\x9b" in (tmp_path / "out" / "report.txt").read_bytes()


def test_compare_and_an_error_escape_folder_names(tmp_path: Path) -> None:
    a_run_dir(manifest(), GOOD_RECORDS)(tmp_path)
    (tmp_path / "rd").rename(tmp_path / f"r{ESC}")
    a_run_dir(manifest(), GOOD_RECORDS)(tmp_path)
    for argv in (("compare", "rd", f"r{ESC}"), ("compare", "rd", f"r{ESC}", f"gone{ESC}"),
                 ("report", "rd", "--baseline", f"x{ESC}"), ("report", "rd", "--out", f"r{ESC}/manifest.json")):
        code, out = _bytes_run(tmp_path, *argv)
        assert code == (0 if len(argv) == 3 else 2) and not _raw(out), (argv, out)
        assert b"\\x1b[2J" in out, (argv, out)  # the folder's name shown, its escape written out


def _host_with(name: str) -> Callable[[Path], None]:
    def build(cwd: Path) -> None:
        host = FakeHost(cwd / "snap", nodes=2, node_mib=1024)
        host.pci("0000:b3:00.0", MLX, CX5, driver=f"mlx5{name}", group=40, numa=1, netdevs=(f"ens1f0{name}",))
        host.pci("0000:00:02.0", 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
        host.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
        host.finish()
    return build


@pytest.mark.parametrize("argv", [("host-groups",), ("host-check",), ("host-prepare", "--dry-run", "--bdf", "b3:00.0")],
                         ids=lambda a: a[0])
def test_host_tree_names_are_escaped_or_refused(tmp_path: Path, argv: tuple[str, ...]) -> None:
    """A driver and an interface named with escape sequences in a host tree: shown escaped (or, where a
    name is checked, refused in words); never raw."""
    _host_with(ESC)(tmp_path)
    code, out = _bytes_run(tmp_path, *argv, "--host-root", "snap")
    assert code in (0, 1, 2) and not _raw(out), out


def test_a_name_cannot_add_a_line(tmp_path: Path) -> None:
    """A newline in an instance name is escaped in the report's lines: the table keeps one row per point."""
    _named(("a\nWARNING: all is well", "b"))(tmp_path)
    code, out = _bytes_run(tmp_path, "report", "rd")
    assert code == 0 and b"\nWARNING: all is well" not in out and b"a\\x0aWARNING: all is well" in out


