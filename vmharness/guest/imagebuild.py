"""`image build`: the guest image from a recipe (guest/recipe.py) — a Debian root made by mmdebstrap,
turned into an ext4 qcow2 with `mkfs.ext4 -d` (no loop mount), its kernel and initrd copied out beside
it for direct boot; a researcher's bzImage goes into the root an earlier build of the recipe kept
(guest/basetree.py), or one mmdebstrap makes now. An image is built in a temporary folder of the
image folder and renamed into place only when complete; one build at a time per folder, and the
unfinished builds of a builder that died are removed by the next."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.guest import basetree, kernelfile
from vmharness.guest.image import Image, find
from vmharness.guest.kernelinput import KernelInput
from vmharness.guest.recipe import Recipe
from vmharness.progress import Progress, Say
from vmharness.system import imagedir, mounts, proc
from vmharness.system.machine import Machine, alive
from vmharness.system.root import HostRoot

_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")


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
    result = proc.run(argv, timeout=3600, env={"VMH_OVERLAY": str(recipe.folder / "overlay")}, check=False)
    if not result.ok:
        generic = ("mmdebstrap failed", "setup failed", "command failed")
        why = [line for line in result.stderr.splitlines()
               if line.startswith("E: ") and not any(g in line for g in generic)]
        raise HarnessError(f"image build: mmdebstrap failed (exit {result.returncode}): "
                           + (why[0][3:] if why else result.stderr.strip()[-300:]),
                           "the lines above say more; a mirror problem shows as a download error")


def _install_kernel(k: KernelInput, rootfs: Path) -> None:
    """A researcher's bzImage into the root as /boot/vmlinuz-RELEASE (its .config beside it, which
    mkinitramfs reads), its modules tree as /lib/modules/RELEASE, their map made by depmod and an
    initramfs of the recipe's configuration by mkinitramfs, both run in the root."""
    assert k.kernel is not None
    boot = _inside(rootfs, "boot")  # the release is checked (kernelfile.bzimage_release): a plain name
    for source, name in ((k.kernel, f"vmlinuz-{k.release}"), (k.config, f"config-{k.release}")):
        if source is not None:
            (boot / name).unlink(missing_ok=True)  # a link planted there is replaced, never written through
            shutil.copyfile(source, boot / name)
    if k.modules:
        tree = _inside(rootfs, "lib/modules") / k.release
        if tree.is_symlink():
            tree.unlink()
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(k.modules, tree, symlinks=True)  # its build and source links kept as links
        proc.run(["chroot", str(rootfs), "depmod", k.release], timeout=600)
        proc.run(["chroot", str(rootfs), "mkinitramfs", "-o", f"/boot/initrd.img-{k.release}", k.release],
                 timeout=1800)


def _inside(rootfs: Path, rel: str) -> Path:
    """rootfs/rel with its links resolved, made if missing, refused unless it stays inside the root:
    merged /usr makes /lib a link (to usr/lib), but one to /usr/lib would lead onto this host."""
    path = Path(os.path.realpath(rootfs / rel))
    if not path.is_relative_to(rootfs.resolve()):
        raise HarnessError(f"image build: /{rel} in the image's root leads outside it (to {path}): not writing there",
                           "the recipe's overlay may hold an absolute link; make it relative (usr/lib, not /usr/lib)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _used_mib(folder: Path) -> int:
    out = proc.run(["du", "-sx", "--block-size=1M", str(folder)], timeout=600).stdout
    return int(out.split()[0])


def _remove(work: Path) -> None:
    """Remove a build's folder, unless a filesystem is still mounted in it: mmdebstrap mounts /proc,
    /sys and /dev into its chroot while it builds, and one that was killed before it could unmount them
    (or still runs) leaves them there; a recursive removal would go on into each of them."""
    held = mounts.under(HostRoot(), str(work.resolve()))
    if held:
        raise HarnessError(f"image build: {work} still has {len(held)} filesystem(s) mounted in it "
                           f"({', '.join(held[:3])}): not removing it",
                           f"a builder (mmdebstrap) may still run; once it is gone: umount -R {held[0]}, "
                           f"then rm -r --one-file-system {work}")
    shutil.rmtree(work, ignore_errors=True)


def _stale_builds(images: Path) -> None:
    """Remove unfinished builds whose builder is gone (a crash or a kill -9)."""
    for old in images.glob(".build-*"):
        pid = old.name.rsplit("-", 1)[-1]
        if is_digits(pid) and not alive(Machine(), int(pid)):
            _remove(old)


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
        _remove(work)
        work.mkdir()
        started = time.monotonic()
        try:
            with Progress("building the guest image", None):
                image = _build_in(recipe, images, work, say, started)
            final = images / recipe.key()
            work.rename(final)
            return Image(final, image.meta), True
        finally:
            _remove(work)


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


def _build_in(recipe: Recipe, images: Path, work: Path, say: Say, started: float) -> Image:
    def step(n: int, text: str) -> None:
        say(f"[{n}/4] {text} ({time.monotonic() - started:.0f} s)")

    rootfs = work / "rootfs"
    base = basetree.path(recipe, images)
    reused = basetree.restore(recipe, images, rootfs)
    if reused:
        step(1, f"the recipe's base tree, kept by an earlier build: {base}")
    else:
        step(1, f"mmdebstrap {recipe.suite} from {recipe.mirror}: {len(recipe.packages)} packages and their "
                "dependencies")
        _mmdebstrap(recipe, rootfs)
        basetree.keep(recipe, images, rootfs, work)
    if recipe.kernel and recipe.kernel.kernel:
        say(f"      your kernel {recipe.kernel.release} installed in it"
            + (": depmod, mkinitramfs" if recipe.kernel.modules else ""))
        _install_kernel(recipe.kernel, rootfs)
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
        "base_tree": "kept" if reused else "built" if basetree.applies(recipe) else "none",
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (work / "image.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return Image(work, meta)
