"""KVM modules named by an instance (`kvm_modules`, model/kvm_modules.py), checked on this machine before
anything is taken: each is code the kernel will run, so it is held to more than a program run as root.

- The file and every folder on the way to it, as written and as its symlinks resolve, can be changed by
  root alone (the rule a QEMU binary is held to, host/inspect/qemu_binary.py): a module in /tmp could
  be swapped between this check and insmod.
- A regular file (not a folder, a FIFO, a device such as /dev/zero), of at most MAX_SIZE bytes, read
  as the project reads a user's file (userfile.py); its sha256 goes into the run's record.
- A module of kvm, kvm_amd or kvm_intel, each at most once (kmod's own `modinfo -F name`), built for
  the running kernel: the release in its vermagic (`modinfo -F vermagic`, first word) is the one
  `uname -r` gives, else it is refused with both strings (insmod would refuse it, after the stock
  modules had been unloaded). Its srcversion (`modinfo -F srcversion`) is what /sys/module/NAME/srcversion
  must read once it is loaded (host/prepare/reload.py).

Loading them is host/prepare/reload.py's: `insmod FILE` instead of `modprobe NAME`, kvm before its
vendor module, journaled first and given back with the stock modules by modprobe."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness import textsafe, userfile
from vmharness.errors import HarnessError
from vmharness.host.inspect.qemu_binary import root_file, root_only_place
from vmharness.system import proc

TIMEOUT = 10.0  # seconds for one modinfo
MAX_SIZE = 256 << 20  # bytes: kvm.ko with debug info is about 20 MiB
NAMES = ("kvm", "kvm_amd", "kvm_intel")
_FIELD = re.compile(r"[A-Za-z0-9_.,:+~ -]{0,200}")  # what modinfo prints for vermagic, name, srcversion
HINT_PLACE = "keep the modules in a folder only root can write (e.g. /root/kvm or /opt/kvm), and name them there"
HINT_BUILD = "build them against the running kernel: make -C /lib/modules/$(uname -r)/build M=$PWD/arch/x86/kvm"


@dataclass(frozen=True)
class Module:
    path: str  # as configured
    real: str  # the file insmod loads, symlinks resolved
    name: str  # kvm, kvm_amd or kvm_intel
    vermagic: str
    srcversion: str  # "" when the build did not write one
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "real": self.real, "name": self.name, "vermagic": self.vermagic,
                "srcversion": self.srcversion, "sha256": self.sha256}


def _refuse(where: str, path: str, what: str, hint: str) -> HarnessError:
    return HarnessError(f"{where} {path[:200]}: {what}", hint)


def modinfo(where: str, path: str, field: str) -> str:
    """One field of a module file as kmod's modinfo reads it (one line of plain text, else refused)."""
    try:
        res = proc.run(["modinfo", "-F", field, "--", path], timeout=TIMEOUT, check=False)
    except HarnessError as exc:
        raise _refuse(where, path, f"modinfo -F {field}: {textsafe.line(exc.message[:160])}",
                      "is kmod installed? Run modinfo on it by hand") from None
    if not res.ok:
        last = (res.stderr.strip() or "no output").splitlines()[-1]
        raise _refuse(where, path, f"is not a kernel module modinfo reads ({res.how}): {textsafe.line(last[:160])}",
                      "name a .ko file built for this kernel")
    out = res.stdout.strip()
    if not _FIELD.fullmatch(out):
        raise _refuse(where, path, f"modinfo -F {field} prints {textsafe.line(out[:80])!r}, not one plain line",
                      "name a .ko file built for this kernel")
    return out


def running_release() -> str:
    return os.uname().release


def check(path: str, where: str) -> Module:
    """The module file at `path` checked as the top says, or one HarnessError naming `where` (the key)."""
    real = root_only_place(path, where, "build it, or fix the path",
                           "the module could be swapped before it is loaded", HINT_PLACE)
    data = userfile.read_file(Path(real), f"{where} {path}", limit=MAX_SIZE,
                              hint="name the module's .ko file itself")
    root_file(os.stat(real), where, path, "", "name the module's .ko file itself", HINT_PLACE)
    name = modinfo(where, real, "name")
    if name not in NAMES:
        raise _refuse(where, path, f"is the module {name or '(no name)'!r}, not one of {', '.join(NAMES)}",
                      "name kvm.ko and kvm-amd.ko or kvm-intel.ko")
    vermagic = modinfo(where, real, "vermagic")
    release = running_release()
    if vermagic.split(" ", 1)[0] != release:
        raise _refuse(where, path, f"was built for another kernel: its vermagic is {vermagic!r}, and the running "
                      f"kernel is {release!r}", HINT_BUILD)
    return Module(path, real, name, vermagic, modinfo(where, real, "srcversion"), hashlib.sha256(data).hexdigest())


def check_all(paths: tuple[str, ...], where: str) -> list[Module]:
    """Each file checked; a module named by two files is refused. Load order: kvm first."""
    found = [check(p, f"{where}[{i}]") for i, p in enumerate(paths)]
    names = [m.name for m in found]
    if len(set(names)) != len(names):
        raise HarnessError(f"{where} names two files of the module {names[0]}", "name each module once")
    if "kvm_amd" in names and "kvm_intel" in names:
        raise HarnessError(f"{where} names both kvm_amd and kvm_intel", "name the vendor module of this CPU")
    return sorted(found, key=lambda m: NAMES.index(m.name))
