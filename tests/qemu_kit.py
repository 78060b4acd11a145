"""Fake QEMU binaries for the checks of `qemu` (host/inspect/qemu_binary.py), shared by its unit tests
and its hostile table, and where the real QEMU 10.0 of the integration test is. The check refuses a
binary in a folder that others than root can write, and pytest's temporary folders are under /tmp
(mode 1777), so a fake that must get past that check to be run (a QEMU that hangs, one that prints
garbage) is made under QEMU_CACHE/test-fakes/, root's all the way up, in a folder of the clone's own
(named by its path's digest: clones side by side do not share one). Not in the clone: a clone may sit
under /tmp itself (a clean clone of this machine's CI did, and every such test failed there)."""

from __future__ import annotations

import hashlib
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


FAKES = QEMU_CACHE / "test-fakes" / hashlib.sha256(str(REPO).encode()).hexdigest()[:12]


def trusted(name: str) -> Path:
    """A fresh folder FAKES/NAME, writable by its owner alone all the way up (asserted: where another
    could write, these tests cannot run as meant)."""
    folder = FAKES / name
    shutil.rmtree(folder, ignore_errors=True)
    for p in reversed((folder, *folder.parents)):
        if not p.exists():
            p.mkdir(mode=0o755)
            p.chmod(0o755)  # whatever the umask
    for p in (folder, *folder.parents):
        st = p.stat()
        assert not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), f"{p} is writable by others"
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
