"""`image build`: the guest image from the recipe in vmharness/data/images/ — a Debian root made by mmdebstrap, turned
into an ext4 qcow2 with `mkfs.ext4 -d` (no loop mount), its kernel and initrd beside it for direct boot.

Images live in IMAGE_DIR/<key>/, where the key hashes everything that goes into one: the recipe folder,
the mirror, the researcher's kernel and this builder's version. An image is built in a temporary folder
and renamed into place only when complete, so a folder with a key in its name is always a whole image.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness import data, userfile
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.guest import kernelfile
from vmharness.model import tomlfile
from vmharness.progress import Progress, Say
from vmharness.system import imagedir, proc
from vmharness.system.machine import Machine, alive

BUILDER_VERSION = "1"  # bump when the steps below change what an image contains
RECIPE_DIR = data.IMAGE_RECIPE
DEFAULT_IMAGE_DIR = imagedir.DEFAULT
MAX_META = 1 << 20  # bytes: an image's image.json
_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")



def image_dir(override: str | None = None) -> Path:
    return imagedir.path(override)


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
            h.update(_file_digest(path).encode())
        if self.modules:
            h.update(_tree_digest(self.modules).encode())
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


@dataclass(frozen=True)
class Recipe:
    folder: Path
    suite: str
    mirror: str
    variant: str
    packages: tuple[str, ...]
    cmdline: str
    free_mib: int
    kernel: KernelInput | None = None
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256

    def key(self) -> str:
        h = hashlib.sha256(f"builder {BUILDER_VERSION}\nmirror {self.mirror}\n".encode())
        for rel, digest in sorted(self.files.items()):
            h.update(f"{rel} {digest}\n".encode())
        if self.kernel:
            h.update(f"kernel {self.kernel.digest()}\n".encode())
        return h.hexdigest()[:16]


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(folder).as_posix()
        content = os.readlink(path) if path.is_symlink() else _file_digest(path)
        h.update(f"{rel} {oct(path.lstat().st_mode)} {content}\n".encode())
    return h.hexdigest()


def host_mirror(suite: str, sources: Path = Path("/etc/apt")) -> str:
    """The first http(s) mirror the host's apt uses for `suite`, else deb.debian.org."""
    texts = []
    for path in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]:
        if path.is_file():
            texts.append(path.read_text(errors="replace"))
    text = "\n".join(texts)
    for uri, suites in re.findall(r"^URIs:\s*(\S+).*?^Suites:\s*([^\n]+)", text, re.M | re.S):
        if suite in suites.split() and uri.startswith("http"):
            return str(uri)
    for uri, line_suite in re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
        if line_suite == suite and uri.startswith("http"):
            return str(uri)
    return "http://deb.debian.org/debian"


def load_recipe(folder: Path = RECIPE_DIR, kernel: KernelInput | None = None) -> Recipe:
    path = folder / "recipe.toml"
    data = tomlfile.read(path, HarnessError(f"no image recipe at {path}",
                                            "pass --recipe DIR, a folder with recipe.toml"))
    want = {"suite": str, "mirror": str, "variant": str, "packages": list, "cmdline": str, "free_mib": int}
    for name, kind in want.items():
        if not isinstance(data.get(name), kind):
            raise HarnessError(f"{path}: {name} must be a {kind.__name__}", f"see {RECIPE_DIR}/recipe.toml")
    unknown = sorted(set(data) - set(want))
    if unknown:
        raise HarnessError(f"{path}: unknown setting {unknown[0]}", "known: " + ", ".join(want))
    if not (folder / "hooks" / "customize.sh").is_file():
        raise HarnessError(f"{folder} has no hooks/customize.sh", f"copy it from {RECIPE_DIR}")
    files = {p.relative_to(folder).as_posix(): _file_digest(p)
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "README.md"}
    return Recipe(folder.resolve(), data["suite"], data["mirror"] or host_mirror(data["suite"]), data["variant"],
                  tuple(data["packages"]), data["cmdline"], data["free_mib"], kernel, files)


@dataclass(frozen=True)
class Image:
    folder: Path
    meta: dict[str, Any]

    @property
    def disk(self) -> Path:
        return self.folder / "disk.qcow2"

    @property
    def kernel(self) -> Path:
        return self.folder / "vmlinuz"

    @property
    def boot_kernel(self) -> Path:
        """What a guest boots: the vmlinux taken out of vmlinuz at build (PVH entry, no decompression
        in the guest), or vmlinuz itself."""
        vmlinux = self.folder / "vmlinux"
        return vmlinux if vmlinux.exists() else self.kernel

    @property
    def initrd(self) -> Path | None:
        path = self.folder / "initrd.img"
        return path if path.exists() else None

    @property
    def cmdline(self) -> str:
        return str(self.meta["cmdline"])


def load_image(folder: Path) -> Image:
    hint = "build one with: vmharness image build"
    text = userfile.text(folder / "image.json", MAX_META, hint,
                         lambda what: HarnessError(f"no image in {folder}: its image.json {what}", hint))
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HarnessError(f"no image in {folder}: its image.json is not JSON", hint) from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("cmdline", ""), str):
        raise HarnessError(f"no image in {folder}: its image.json is not what image build writes", hint)
    image = Image(folder, meta)
    if not image.disk.exists() or not image.kernel.exists():
        raise HarnessError(f"image {folder} is incomplete", "rebuild it: vmharness image build")
    return image


def find(recipe: Recipe, images: Path) -> Image | None:
    folder = images / recipe.key()
    return load_image(folder) if (folder / "image.json").exists() else None


def _pick_kernel(boot: Path, release: str | None) -> tuple[Path, Path | None, str]:
    kernels = sorted(boot.glob("vmlinuz-*"))
    if release is not None:
        kernels = [k for k in kernels if k.name == f"vmlinuz-{release}"]
    if not kernels:
        raise HarnessError(f"the image has no kernel{' ' + release if release else ''} in /boot",
                           "add linux-image-amd64 to the recipe's packages, or pass --kernel")
    kernel = kernels[-1]
    rel = kernel.name.removeprefix("vmlinuz-")
    initrd = boot / f"initrd.img-{rel}"
    return kernel, initrd if initrd.exists() else None, rel


def _mmdebstrap(recipe: Recipe, rootfs: Path) -> None:
    argv: list[str] = ["mmdebstrap", "--mode=root", f"--variant={recipe.variant}", "--quiet"]
    includes = list(recipe.packages)
    if recipe.kernel and recipe.kernel.deb:
        includes.append(str(recipe.kernel.deb))
    argv.append("--include=" + ",".join(includes))
    argv += [f"--dpkgopt=path-exclude={p}" for p in _EXCLUDES]
    argv.append(f"--customize-hook={recipe.folder / 'hooks' / 'customize.sh'}")
    argv += [recipe.suite, str(rootfs), recipe.mirror]
    env = {"VMH_OVERLAY": str(recipe.folder / "overlay"), "VMH_KERNEL": "", "VMH_MODULES": "", "VMH_KVER": "",
           "VMH_CONFIG": ""}
    k = recipe.kernel
    if k and k.kernel:
        env.update(VMH_KERNEL=str(k.kernel), VMH_MODULES=str(k.modules or ""), VMH_KVER=k.release,
                   VMH_CONFIG=str(k.config or ""))
    result = proc.run(argv, timeout=3600, env=env, check=False)
    if not result.ok:
        generic = ("mmdebstrap failed", "setup failed", "command failed")
        why = [line for line in result.stderr.splitlines()
               if line.startswith("E: ") and not any(g in line for g in generic)]
        raise HarnessError(f"image build: mmdebstrap failed (exit {result.returncode}): "
                           + (why[0][3:] if why else result.stderr.strip()[-300:]),
                           "the lines above say more; a mirror problem shows as a download error")


def _used_mib(folder: Path) -> int:
    out = proc.run(["du", "-sx", "--block-size=1M", str(folder)], timeout=600).stdout
    return int(out.split()[0])


def _stale_builds(images: Path) -> None:
    """Remove unfinished builds whose builder is gone (a crash or a kill -9)."""
    for old in images.glob(".build-*"):
        pid = old.name.rsplit("-", 1)[-1]
        if is_digits(pid) and not alive(Machine(), int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def build(recipe: Recipe, images: Path, say: Say, named_by: str | None = None,
          force: bool = False) -> tuple[Image, bool]:
    """The image for `recipe`: found in `images` (False) or built now (True); `images` is made or checked
    as the builds' own folder first (system/imagedir.py; `named_by` names it in errors)."""
    existing = find(recipe, images)
    if existing is not None:
        return existing, False
    if os.geteuid() != 0:
        raise HarnessError("image build needs root (mmdebstrap --mode=root, file ownership in the image)",
                           "run it with sudo")
    imagedir.claim(images, named_by or imagedir.flag(), force)
    with _one_builder(images, say):
        existing = find(recipe, images)  # built while this one waited
        if existing is not None:
            return existing, False
        _stale_builds(images)
        work = images / f".build-{recipe.key()}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        started = time.monotonic()
        try:
            with Progress("building the guest image", None):
                image = _build_in(recipe, work, say, started)
            final = images / recipe.key()
            work.rename(final)
            return Image(final, image.meta), True
        finally:
            shutil.rmtree(work, ignore_errors=True)


@contextmanager
def _one_builder(images: Path, say: Say) -> Iterator[None]:
    """One build at a time in a folder: a second `image build` of the same recipe waits for the first
    and then finds its image (both building would cost twice the time and the loser's rename fails)."""
    fd = os.open(images / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another image build in {images}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _build_in(recipe: Recipe, work: Path, say: Say, started: float) -> Image:
    def step(n: int, text: str) -> None:
        say(f"[{n}/4] {text} ({time.monotonic() - started:.0f} s)")

    rootfs = work / "rootfs"
    step(1, f"mmdebstrap {recipe.suite} from {recipe.mirror}: {len(recipe.packages)} packages and their dependencies")
    _mmdebstrap(recipe, rootfs)
    kernel, initrd, release = _pick_kernel(rootfs / "boot", recipe.kernel.release if recipe.kernel else None)
    elf = kernelfile.uncompressed(kernel)
    step(2, f"kernel {release}{'' if initrd else ' (no initrd: drivers must be built in)'} copied out for direct boot"
         + (", with its vmlinux (booted through PVH: no decompression in the guest)" if elf else ""))
    shutil.copyfile(kernel, work / "vmlinuz")
    if elf is not None:
        (work / "vmlinux").write_bytes(elf)
    if initrd:
        shutil.copyfile(initrd, work / "initrd.img")
    used = _used_mib(rootfs)
    size = used + used // 5 + recipe.free_mib + 64
    step(3, f"mkfs.ext4 -d: {used} MiB of files in a {size} MiB filesystem")
    raw = work / "disk.raw"
    with raw.open("wb") as f:
        f.truncate(size << 20)
    proc.run(["mkfs.ext4", "-q", "-F", "-L", "vmh-root", "-E", "root_owner=0:0", "-d", str(rootfs), str(raw)],
             timeout=1800)
    shutil.rmtree(rootfs)
    step(4, "qcow2")
    proc.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(work / "disk.qcow2")],
             timeout=1800)
    raw.unlink()
    versions = proc.run(["qemu-img", "info", "--output=json", str(work / "disk.qcow2")], timeout=60).stdout
    meta = {
        "key": recipe.key(), "suite": recipe.suite, "mirror": recipe.mirror, "packages": list(recipe.packages),
        "kernel_release": release, "custom_kernel": bool(recipe.kernel), "cmdline": recipe.cmdline,
        "filesystem_mib": size, "files_mib": used, "disk_bytes": json.loads(versions)["actual-size"],
        "build_seconds": round(time.monotonic() - started, 1),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (work / "image.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return Image(work, meta)
