"""A QEMU binary named in the configuration (`qemu`, model/emulator.py), checked on this machine before
anything is taken: libvirt will run it as the guest's emulator with root's say-so, so it is held to what
a program run as root must be.

- The file and every folder on the way to it, as written and as its symlinks resolve, can be changed by
  root alone (owned by root, or by whoever runs the harness, and writable by no group or other user):
  a binary in /tmp, or a symlink there, could be swapped between this check and the guest's start.
- A regular, executable file: not a folder, a FIFO (opening one blocks), a device (`/dev/zero`); one
  that libvirt's QEMU user (libvirt-qemu, not root) can run, so not under /root (mode 700), which is
  otherwise said only when the guest's start fails.
- A QEMU: it answers `-version` within TIMEOUT seconds with QEMU's own first line (a program that hangs
  or prints something else is not run further), knows the machine type the domain uses (MACHINE), and
  expands the CPU model libvirt asks of it (`max` under TCG, `host` under KVM) over QMP; that answer is
  also the list the instance's cpu_features are checked against (host/inspect/cpubits.py), since each
  QEMU version knows other names (7.2 has no rfds-no, gds-no, bhi-no or srso-no).

Its version and the file's sha256 go into the run's manifest, so that a result names the emulator it
was measured with; the session records add the binary the guest's process runs (/proc/PID/exe)."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness import textsafe, userfile
from vmharness.errors import HarnessError
from vmharness.host.inspect import cpubits
from vmharness.system import proc

TIMEOUT = 5.0  # seconds for `-version` and `-machine help`; QEMU answers each in about 0.05 s
MACHINE = "q35"  # the machine type guest/domain.py writes
MAX_SIZE = 1 << 30  # bytes hashed at most; QEMU 10.0's x86_64 binary is about 28 MiB
_VERSION = re.compile(r"QEMU emulator version (\d{1,4}\.\d{1,4}(?:\.\d{1,4})?)(?: \(([^()]{0,200})\))?\Z")
HINT_REACH = "keep it where every user may run it (not under /root), e.g. /opt/qemu-10/bin or /var/cache/vmharness"
HINT_PLACE = "keep the QEMU in a folder only root can write (e.g. /opt/qemu-10/bin), and name it there"


@dataclass(frozen=True)
class Binary:
    path: str  # as configured
    real: str  # the file it names, symlinks resolved
    version: str  # "10.0.2"
    build: str  # what follows the version in parentheses: "Debian 1:10.0.2+ds-2+deb13u1~bpo12+1"
    sha256: str
    cpu: cpubits.Qemu  # its answer for the CPU model and the features it knows

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "real": self.real, "version": self.version, "build": self.build,
                "sha256": self.sha256}


def _refuse(where: str, path: str, what: str, hint: str = HINT_PLACE) -> HarnessError:
    return HarnessError(f"{where} {path[:200]}: {what}", hint)


def _folders(path: str) -> list[str]:
    """`/a/b/c` -> `/`, `/a`, `/a/b`."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts) + 1)]


def root_only(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def root_file(st: os.stat_result, where: str, path: str, shown: str, name_it: str, place: str) -> None:
    """Refused unless `st` is a regular file that only root (or whoever runs the harness) can write;
    `shown`: where a link led (" (-> /real/path)") or ""; `name_it` and `place`: the hints."""
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(where, path, f"is {userfile.kind_of(st.st_mode)}{shown}, not a regular file", name_it)
    if not root_only(st):
        raise _refuse(where, path, f"the file{shown} can be written by others than root (owner uid {st.st_uid}, "
                      f"mode {stat.S_IMODE(st.st_mode):o})", place)


def root_only_place(path: str, where: str, missing: str, swapped: str, hint: str = HINT_PLACE) -> str:
    """The file `path` names, symlinks resolved, once it exists and every folder to it (as written and as
    resolved) can be changed by root alone; `missing` is the hint when it is not there, `swapped` says
    what a file swapped in such a folder would do."""
    try:
        real = os.path.realpath(path, strict=True)
    except (OSError, RuntimeError) as exc:  # missing, a symlink loop, a folder that cannot be entered
        raise _refuse(where, path, f"cannot be found ({getattr(exc, 'strerror', None) or exc})", missing) from None
    for folder in dict.fromkeys(_folders(path) + _folders(real)):
        st = os.stat(folder)  # followed: a symlinked folder is judged by where it leads
        if not root_only(st):
            shown = folder if os.path.realpath(folder) == folder else f"{folder} (-> {os.path.realpath(folder)})"
            raise _refuse(where, path, f"the folder {shown} can be written by others than root (owner uid "
                          f"{st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): {swapped}", hint)
    return real


def check_file(path: str, where: str) -> str:
    """The file `path` names, symlinks resolved, once it and the folders to it pass (see the top)."""
    real = root_only_place(path, where, "install that QEMU, or fix the path",
                           "the binary could be swapped before libvirt runs it")
    st = os.stat(real)
    shown = "" if real == path else f" (-> {real})"
    root_file(st, where, path, shown, "name the qemu-system-x86_64 binary itself", HINT_PLACE)
    if not st.st_mode & 0o111 or not os.access(real, os.X_OK):
        raise _refuse(where, path, f"is not executable{shown}", "name the qemu-system-x86_64 binary itself")
    for folder in _folders(real):  # libvirt runs the emulator as its own user (libvirt-qemu), not as root
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            raise _refuse(where, path, f"libvirt's QEMU user cannot reach it: the folder {folder} is mode "
                          f"{stat.S_IMODE(os.stat(folder).st_mode):o}", HINT_REACH)
    if not st.st_mode & stat.S_IXOTH:
        raise _refuse(where, path, f"libvirt's QEMU user cannot run it{shown}: mode {stat.S_IMODE(st.st_mode):o}",
                      HINT_REACH)
    return real


def _ask(where: str, path: str, argv: list[str], what: str) -> str:
    try:
        res = proc.run(argv, timeout=TIMEOUT, check=False)
    except HarnessError as exc:
        raise _refuse(where, path, f"did not answer {what} within {TIMEOUT:g} s" if "did not finish" in exc.message
                      else exc.message, "is it a QEMU? Run it by hand with " + what) from None
    if not res.ok:
        last = (res.stderr.strip() or res.stdout.strip() or "no output").splitlines()[-1]
        raise _refuse(where, path, f"{what} failed ({res.how}): {textsafe.line(last[:160])}",
                      "is it a QEMU? Run it by hand with " + what)
    return res.stdout


def parse_version(stdout: str) -> tuple[str, str] | None:
    """(version, build) from `-version`'s first line; None when it is not QEMU's."""
    first = stdout.split("\n", 1)[0].strip()
    m = _VERSION.fullmatch(first)
    return (m.group(1), m.group(2) or "") if m else None


def inspect(path: str, where: str, kvm: bool) -> Binary:
    """The QEMU at `path` checked as the top says, or one HarnessError naming `where` (the key)."""
    real = check_file(path, where)
    out = _ask(where, path, [real, "-version"], "-version")
    found = parse_version(out)
    if found is None:
        said = textsafe.line(out.split("\n", 1)[0][:80]) or "nothing"
        raise _refuse(where, path, f"does not answer -version as QEMU does (its first line: {said!r})",
                      "name a qemu-system-x86_64 binary")
    machines = _ask(where, path, [real, "-machine", "help"], "-machine help")
    if not any(line.split(" ", 1)[0] == MACHINE for line in machines.splitlines()):
        raise _refuse(where, path, f"QEMU {found[0]} has no machine type {MACHINE}, which the guest's domain uses",
                      "use a qemu-system-x86_64 built with it")
    try:
        cpu = cpubits.ask(kvm, real)
    except HarnessError as exc:
        model = "host" if kvm else "max"
        raise _refuse(where, path, f"QEMU {found[0]} cannot expand the CPU model {model} the domain uses: "
                      f"{textsafe.line(exc.message[:160])}", "run it by hand with -qmp stdio") from None
    data = userfile.read_file(Path(real), f"{where} {path}", limit=MAX_SIZE)
    return Binary(path, real, found[0], found[1], hashlib.sha256(data).hexdigest(), cpu)
