"""Kernel modules: loaded, built in, loadable from /lib/modules, or not to be had."""

from __future__ import annotations

import re
from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.system.root import LARGE_READ, HostRoot

OSRELEASE = "/proc/sys/kernel/osrelease"


@dataclass(frozen=True)
class ModuleState:
    name: str
    state: str  # loaded | built-in | loadable | missing
    detail: str

    @property
    def available(self) -> bool:
        return self.state != "missing"


def kernel_release(root: HostRoot) -> str | None:
    """The running kernel's release ("6.1.0-18-amd64"), which names its /lib/modules folder; None if
    the file is not there."""
    rel = root.read_optional(OSRELEASE)
    if rel is not None and not re.fullmatch(r"[\w.+~-]{1,128}", rel):
        raise HarnessError(f"{OSRELEASE} holds {rel[:40]!r}, not a kernel release",
                           "the host root is damaged: unpack the snapshot again, or take a new one")
    return rel


def _files_name(name: str) -> tuple[str, ...]:
    base = name.replace("_", "-"), name.replace("-", "_")
    return tuple(f"{b}.ko{ext}" for b in base for ext in ("", ".xz", ".zst", ".gz"))


def _listed(text: str | None, files: tuple[str, ...]) -> bool:
    if not text:
        return False
    for line in text.splitlines():
        path = line.split(":", 1)[0].strip()
        if path.rsplit("/", 1)[-1] in files:
            return True
    return False


def state(root: HostRoot, name: str) -> ModuleState:
    sysname = name.replace("-", "_")
    if root.exists(f"/sys/module/{sysname}/initstate"):
        return ModuleState(name, "loaded", "loaded")
    rel = kernel_release(root)
    moddir = f"/lib/modules/{rel}"
    files = _files_name(name)
    builtin = root.read_optional(f"{moddir}/modules.builtin", limit=LARGE_READ)
    if root.exists(f"/sys/module/{sysname}") or _listed(builtin, files):
        return ModuleState(name, "built-in", "built into the kernel")
    if _listed(root.read_optional(f"{moddir}/modules.dep", limit=LARGE_READ), files):
        return ModuleState(name, "loadable", f"loadable from {moddir}")
    if not root.exists("/proc/modules"):
        return ModuleState(name, "missing", "not built in, and this kernel cannot load modules")
    if not root.exists(moddir):
        return ModuleState(name, "missing", f"not loaded and {moddir} does not exist")
    return ModuleState(name, "missing", f"not loaded, not built in, not in {moddir}")
