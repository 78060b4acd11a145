"""The kernel an image is built with when the researcher brings one (`image build --kernel`): a bzImage
with its modules tree and .config, or a linux-image .deb, checked as the flags are read (the files
themselves by guest/kernelfile.py) and hashed into the image's key."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.guest import kernelfile
from vmharness.guest.digest import file_digest, tree_digest


@dataclass(frozen=True)
class KernelInput:
    """A researcher's kernel: a bzImage (with its modules tree) or a linux-image .deb."""

    release: str
    kernel: Path | None = None
    modules: Path | None = None
    deb: Path | None = None
    config: Path | None = None  # the kernel's .config: mkinitramfs reads it

    def digest(self) -> str:
        h = hashlib.sha256(self.release.encode())
        for path in filter(None, (self.kernel, self.deb, self.config)):
            h.update(file_digest(path).encode())
        if self.modules:
            h.update(tree_digest(self.modules).encode())
        return h.hexdigest()


def _kernel_config(kernel: Path, release: str, given: str | None) -> Path | None:
    """The kernel's .config: given, or beside a Debian-style vmlinuz, or at the top of a build tree."""
    if given:
        path = Path(given).resolve()
        if not path.is_file():
            raise HarnessError(f"no such kernel config: {given}", "pass the .config the kernel was built with")
        return path
    for candidate in (kernel.parent / f"config-{release}", kernel.parents[3] / ".config"
                      if len(kernel.parents) > 3 else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def kernel_input(kernel: str | None, modules: str | None, config: str | None = None) -> KernelInput | None:
    """Checks `--kernel PATH [--modules DIR] [--kernel-config FILE]` (a bzImage) or `--kernel FILE.deb`."""
    if kernel is None:
        if modules:
            raise HarnessError("--modules needs --kernel", "pass the bzImage the modules were built with")
        return None
    path = Path(kernel).resolve()
    if path.suffix == ".deb":
        if modules:
            raise HarnessError("--modules does not go with a .deb", "the package carries its own modules")
        deb = kernelfile.deb_kernel(path)
        return KernelInput(deb.release, deb=deb.path)
    if not path.is_file():
        raise HarnessError(f"no such kernel: {kernel}", "pass the path of a bzImage or a linux-image .deb")
    release = kernelfile.bzimage_release(path)
    mods = Path(modules).resolve() if modules else None
    cfg = _kernel_config(path, release, config)
    if mods is not None:
        kernelfile.check_modules(mods, release)
        if cfg is None:
            raise HarnessError(f"no .config found for kernel {release} (the image's initramfs is made from it)",
                               "pass --kernel-config PATH, the .config of the kernel build")
    return KernelInput(release, kernel=path, modules=mods, config=cfg)
