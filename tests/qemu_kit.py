"""Fake QEMU binaries for the checks of `qemu` (host/inspect/qemu_binary.py), shared by its unit tests
and its hostile table, and where the real QEMU 10.0 of the integration test is. The check refuses a
binary in a folder that others than root can write, and pytest's temporary folders are under /tmp
(mode 1777), so a fake that must get past that check to be run (a QEMU that hangs, one that prints
garbage) is made in a folder of the clone's own `.cache/` (ignored by git), which is root's like the
clone."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL = shutil.which("qemu-system-x86_64") or "/usr/bin/qemu-system-x86_64"
# where `make qemu-10` unpacks QEMU 10.0 (the Makefile's QEMU_CACHE)
QEMU_CACHE = Path(os.environ.get("VMHARNESS_QEMU_CACHE") or "/var/cache/vmharness")

# `exec`: the timeout's kill reaches sleep itself, so no sleeping child is left behind
HANGS = "#!/bin/sh\nexec sleep 60\n"
GARBAGE = "#!/bin/sh\nprintf 'hello \\033[2J world\\n'\n"
FAILS = "#!/bin/sh\necho 'qemu: cannot open shared object' >&2\nexit 1\n"
NO_Q35 = ("#!/bin/sh\ncase \"$1\" in\n-version) echo 'QEMU emulator version 9.9.9' ;;\n"
          "-machine) echo 'Supported machines are:'; echo 'pc   Standard PC (i440FX + PIIX, 1996)' ;;\nesac\n")
NO_CPU = NO_Q35.replace("echo 'pc   Standard", "echo 'q35  Standard")  # and no answer over QMP


def qemu_10() -> Path | None:
    """The newest QEMU 10.0 `make qemu-10` unpacked, or None."""
    found = sorted(QEMU_CACHE.glob("qemu-10.0*/usr/bin/qemu-system-x86_64"))
    return found[-1] if found else None


def trusted(name: str) -> Path:
    """A fresh folder `.cache/qemu-fakes/NAME` of the clone, writable by its owner alone all the way up
    (asserted: a clone in a folder others can write cannot run these tests as meant)."""
    folder = REPO / ".cache" / "qemu-fakes" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o755)
    for p in (folder, *folder.parents):
        st = p.stat()
        assert not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), f"{p} is writable by others: move the clone"
    return folder


def script(name: str, text: str) -> Path:
    """An executable script `qemu-system-x86_64` in trusted(name)."""
    path = trusted(name) / "qemu-system-x86_64"
    path.write_text(text)
    path.chmod(0o755)
    return path


def fifo(name: str) -> Path:
    path = trusted(name) / "qemu-system-x86_64"
    os.mkfifo(path, 0o755)
    return path


def link(name: str, target: str | Path) -> Path:
    path = trusted(name) / "qemu-system-x86_64"
    path.symlink_to(target)
    return path
