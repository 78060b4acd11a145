"""The KVM probe's answer kept for this boot of the host, in /run/vmharness/kvm-probe.json (a tmpfs:
a reboot empties it). A probe that fails costs its deadline, 8 to 15 s on the development machines'
PVM /dev/kvm (kvm.py), and every `run`, `vm up` and `host-check` asks it once: a test suite or a
campaign of many runs paid it hundreds of times. kvm.py keeps a "yes" (a kernel booted under KVM) and
the "no" of a PVM /dev/kvm; any other "no" rests on a deadline a loaded machine may miss, and is
measured again by the next command.

The answer is taken again only while all it depends on is the same, which the file names as its key:
this boot of the host (the kernel's boot_id), /dev/kvm itself (device number, inode and modification
time: a KVM module loaded again makes the node anew; and its mode, owner and group), the kvm modules
loaded and every parameter they show, the QEMU binary and the kernel the probe boots (path, size,
modification time), and the probe's deadlines. Anything else (no file, another key, a file that is not
the harness's regular file of at most MAX_BYTES, or one that does not parse into an answer) and the
probe runs again and the file is replaced. The file is written only into the harness's state folder,
never through a link (system/owned.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from vmharness import userfile
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.system.owned import Folder

STATE_DIR = Path(journal.STATE_DIR)  # the journal's folder, made 0700 by root
NAME = "kvm-probe.json"
MAX_BYTES = 256 << 10  # the answer is a few KiB: the steps' details and TCG's yardstick
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MODULES = Path("/sys/module")
MAX_PARAMETER = 4096  # bytes read of one module parameter's file


def _file(path: Path | None) -> list[object]:
    if path is None:
        return [None]
    try:
        st = os.stat(path)
    except OSError:
        return [str(path), None]
    return [str(path), st.st_size, st.st_mtime_ns]


def _modules() -> dict[str, dict[str, str]]:
    """The kvm modules loaded (kvm, kvm_intel, kvm_amd, kvm_pvm, ...) and the values of their parameters."""
    found: dict[str, dict[str, str]] = {}
    try:
        names = sorted(p.name for p in MODULES.iterdir() if p.name.startswith("kvm"))
    except OSError:
        return found
    for name in names:
        params: dict[str, str] = {}
        folder = MODULES / name / "parameters"
        try:
            entries = sorted(folder.iterdir()) if folder.is_dir() else []
        except OSError:
            entries = []
        for p in entries:
            try:
                with open(p, "rb") as f:
                    params[p.name] = f.read(MAX_PARAMETER).decode(errors="replace").strip()
            except OSError:
                params[p.name] = "?"  # unreadable (write-only): its presence still counts
        found[name] = params
    return found


def key(dev: str, qemu: str | None, kernel: Path | None, deadlines: tuple[float, float]) -> dict[str, Any]:
    """What the probe's answer depends on, as it is now."""
    try:
        boot = BOOT_ID.read_text().strip()
    except OSError:
        boot = None
    try:
        st = os.stat(dev)
        # not its change time: the harness's libvirtd (host/libvirt/daemon.py) sets the node's group and mode
        # as udev leaves them and puts them back, which moved it and cost the next command the probe again
        node: list[object] | None = [st.st_rdev, st.st_ino, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_gid]
    except OSError:
        node = None
    return {"boot_id": boot, "dev": [dev, node], "modules": _modules(), "qemu": _file(Path(qemu) if qemu else None),
            "kernel": _file(kernel), "deadlines": list(deadlines)}


def recall(now: dict[str, Any]) -> dict[str, Any] | None:
    """The answer kept for `now`'s key (to_json's form), or None: none kept, another key, or a file that
    is not one the harness wrote."""
    if now["boot_id"] is None:
        return None
    try:
        data = json.loads(userfile.read_inside(STATE_DIR, NAME, MAX_BYTES))  # no link, one name
    except (OSError, HarnessError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != now:
        return None
    answer = data.get("answer")
    if not (isinstance(answer, dict) and isinstance(answer.get("usable"), bool)
            and isinstance(answer.get("detail"), str)):
        return None
    return answer


def keep(now: dict[str, Any], answer: dict[str, Any]) -> None:
    """Keep `answer` for `now`'s key; where the state folder cannot be written (not root, a read-only
    /run), the next command probes again, as before."""
    if now["boot_id"] is None:
        return
    try:
        STATE_DIR.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(STATE_DIR)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():  # a link, or someone else's
            return
        Folder(STATE_DIR, str(STATE_DIR)).write(NAME, json.dumps({"key": now, "answer": answer}).encode())
    except (OSError, HarnessError):
        return
