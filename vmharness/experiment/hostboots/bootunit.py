"""The systemd unit that goes on with a run after each host boot: a simple service (the boot does not
wait for the hours the run takes, as it would for a oneshot its target wants), enabled for
multi-user.target, whose one command is `vmharness run --resume RUN_DIR` (the run's state file says
where it was). Installed before the run's first switch, where systemd runs (/run/systemd/system
exists), and removed when the run is home; on a host without systemd the run says what to run.

The unit is written by the harness whole, from two paths and fixed text: the Python that runs the
harness and the run folder (and the folder the run was started in, where its relative paths lead),
each an absolute path of plain characters (letters, digits, `._+-/`), checked here, so nothing in it
is read by systemd as a specifier (%), a variable ($), a quote or an escape, and no value of the
configuration is in it at all.

Journaled (op `boot unit`, owner `host boots`, which a run's own give-back before each switch does not
touch) before it is written; undone by removing the unit and its link, then `systemctl daemon-reload`.
The journal lives in /run, which a boot empties: the resumed run journals it again before anything
else, and host-restore also removes a unit it finds that says it is the harness's (`leftover`)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.journal.kinds import OpKind
from vmharness.system import proc
from vmharness.system.root import HostRoot

NAME = "vmharness-host-boots.service"
UNITS = "/etc/systemd/system"
UNIT = f"{UNITS}/{NAME}"
WANTS = f"{UNITS}/multi-user.target.wants"
LINK = f"{WANTS}/{NAME}"
RUNNING = "/run/systemd/system"  # systemd is the init of this boot (sd_booted(3))
OWNER = "host boots"
MAX_UNIT = 64 << 10  # bytes: the harness's unit is under 1 KiB
MARK = "# made by vmharness: the run across host boots; removed when it is home (vmharness host-restore)"
_PLAIN = re.compile(r"/(?:[A-Za-z0-9._+-]+/?)*")


def has_systemd(root: HostRoot) -> bool:
    return root.is_dir(RUNNING)


def _plain(path: str, what: str) -> str:
    if not _PLAIN.fullmatch(path) or len(path) > 1024 or any(p in (".", "..") for p in path.split("/")):
        raise HarnessError(f"{what} {path[:200]!r} is not an absolute path of plain characters (letters, digits, "
                           "._+-/): the unit that resumes the run after a host boot cannot name it",
                           "start the run from a folder, with --out and a Python, whose paths are plain")
    return path.rstrip("/") or "/"


def text(run_dir: Path, cwd: Path, python: str) -> str:
    """The unit's text: fixed but for three checked paths, each a word of its own."""
    argv = [_plain(python, "the Python running vmharness"), "-m", "vmharness", "run", "--resume",
            _plain(str(run_dir), "the run folder")]
    return "\n".join([
        MARK,
        "[Unit]",
        "Description=vmharness: go on with a run across host boots",
        "After=network-online.target libvirtd.service",
        "Wants=network-online.target",
        "[Service]",
        "Type=simple",
        f"WorkingDirectory={_plain(str(cwd), 'the folder the run was started in')}",
        f"ExecStart={' '.join(argv)}",
        "[Install]",
        "WantedBy=multi-user.target",
        ""])


def _reload(root: HostRoot) -> None:
    """systemd reads the changed unit files: on the live host alone (a test's tree has no systemd)."""
    if root.live:
        proc.run(["systemctl", "daemon-reload"], timeout=120)


def _at(root: HostRoot, folder: str, what: str = "write") -> Path:
    """The real path of NAME in `folder`, the folder resolved, never NAME itself (it may be a link)."""
    return root.writable(folder, what) / NAME


def install(root: HostRoot, run_dir: Path, cwd: Path, python: str = sys.executable) -> None:
    """Journal the unit, write it and enable it (the link systemctl enable would make)."""
    body = text(run_dir, cwd, python).encode()
    unit = _at(root, UNITS)
    if unit.is_symlink() or (unit.exists() and not unit.is_file()):
        raise HarnessError(f"{UNIT} is a symlink or not a file: vmharness does not write through it",
                           "remove it (it is not the harness's), then run again")
    record(root)
    root.mkdir(WANTS)
    fd = os.open(unit, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    link = _at(root, WANTS)
    if os.path.lexists(link):
        if not (link.is_symlink() and os.readlink(link) == UNIT):
            raise HarnessError(f"{LINK} is there and is not the harness's link to {UNIT}", "remove it, then run again")
    else:
        os.symlink(UNIT, link)
    _reload(root)


def record(root: HostRoot) -> None:
    """Journal the unit (again, after a boot emptied /run), unless an outstanding record says it."""
    if not any(r["op"] == OpKind.BOOT_UNIT for r in journal.outstanding(journal.read(root))):
        journal.record(root, {"op": OpKind.BOOT_UNIT, "path": UNIT}, OWNER)


def installed(root: HostRoot) -> bool:
    """Whether the unit there is the harness's (its first line says so); a link there is no one's
    the harness removes. Read as any file of a host root is: capped, regular files alone."""
    if (root.path(UNITS) / NAME).is_symlink():
        return False
    text = root.read_optional(UNIT, limit=MAX_UNIT)
    return text is not None and text.startswith(MARK)


def remove(root: HostRoot) -> None:
    """Remove the link and the unit (the harness's alone), and have systemd read them again."""
    link = _at(root, WANTS, "remove")
    if link.is_symlink() and os.readlink(link) == UNIT:
        link.unlink()
    if installed(root):
        _at(root, UNITS, "remove").unlink()
    _reload(root)


def leftover(root: HostRoot) -> list[str]:
    """host-restore: a harness unit that no journal record names (a boot emptied /run before the resumed
    run journaled it again) is removed too; returns what was removed, in words."""
    if not installed(root):
        return []
    remove(root)
    return [f"removed {UNIT}, which would have resumed a run after the next boot"]


def _describe(rec: journal.Record) -> str:
    return f"the systemd unit {rec['path']} that resumes a run after a host boot"


def _kept(rec: journal.Record) -> str | None:
    return None if rec["path"] == UNIT else f"not the unit vmharness makes ({UNIT})"


def _undo(root: HostRoot, rec: journal.Record) -> list[str]:
    if (why := _kept(rec)) is not None:
        return [why]
    remove(root)
    return []


journal.register(OpKind.BOOT_UNIT, journal.Op(_describe, _undo, ("path",), _kept, types={"path": journal.is_str}))
