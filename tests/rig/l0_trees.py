"""What L1 is given of L0's files: the trees it reads through its caching mount, the package's bytecode
compiled for it, and the folder an L1 that reboots keeps across boots (topology.CACHED_TAG, PERSIST_TAG)."""

from __future__ import annotations

import compileall
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.rig import kernel
from tests.rig.paths import REPO


def cached_trees() -> list[Path]:
    """What L1 reads through its caching mount (topology.CACHED_TAG): /usr, the interpreter's own
    prefix (pyenv's, outside /usr, on this machine), the venv and the package."""
    found: list[Path] = []
    for tree in (Path("/usr"), Path(sys.base_prefix).resolve(), REPO / ".venv", REPO / "vmharness"):
        if tree.is_dir() and not any(tree.is_relative_to(t) for t in found):
            found.append(tree)
    return found


def compile_package() -> None:
    """The package's bytecode in its own __pycache__ folders. L1 reads the package from L0's read-only
    root and cannot write it: compiled here, or every command there compiles each module again (under
    TCG, a third of its start). Beside the sources whatever PYTHONPYCACHEPREFIX says here, since L1's
    commands run without it."""
    prefix, sys.pycache_prefix = sys.pycache_prefix, None
    try:
        compileall.compile_dir(REPO / "vmharness", quiet=1, workers=1)
    finally:
        sys.pycache_prefix = prefix


def fill_persist(folder: Path, boots: Sequence[tuple[kernel.Kernel, Path]]) -> None:
    """The folder L1 keeps across boots: the host boots' state, the runs and libvirt's cache (empty), and
    in its /boot each kernel L1 may boot with the rig's initramfs for it (`boots`: the kernel L1 starts
    in, which it comes home to, then any other a host boot names; the bzImage, since kexec loads one).
    tests/rig/l1-init.sh binds each into place and copies the kernels into L1's /boot."""
    for sub in ("boot", "hostboots", "runs", "libvirt-cache"):
        (folder / sub).mkdir(mode=0o755, parents=True)
    folder.chmod(0o755)
    for kern, initrd in boots:
        shutil.copyfile(kern.vmlinuz, folder / "boot" / f"vmlinuz-{kern.release}")
        shutil.copyfile(initrd, folder / "boot" / f"initrd.img-{kern.release}")
