"""The Debian kernel L1 boots: fetched with `apt-get download` and unpacked into the cache,
never installed on this machine."""

from __future__ import annotations

import logging
import lzma
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zstandard

from tests.rig.paths import cache_lock
from vmharness.errors import HarnessError
from vmharness.system.proc import run

log = logging.getLogger("tests.rig.kernel")

META_PACKAGE = "linux-image-amd64"
_DONE = ".release"  # "<release> <version>", written last: without it, a tree is unfinished


@dataclass(frozen=True)
class Kernel:
    package: str
    version: str
    release: str
    root: Path
    """The unpacked package: `boot/` and `lib/modules/<release>/` (with a generated modules.dep)."""

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def vmlinux(self) -> Path:
        return self.root / "boot" / f"vmlinux-{self.release}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.release

    @property
    def boot_image(self) -> Path:
        """What QEMU's -kernel gets: the unpacked ELF when there is one (QEMU boots it
        through its PVH entry point, about 3 s sooner under TCG), else the bzImage."""
        return self.vmlinux if self.vmlinux.is_file() else self.vmlinuz


def obtain(meta: str = META_PACKAGE) -> Kernel:
    """Return the kernel package `meta` depends on, downloading and unpacking it unless
    a tree for that package (its ABI name, e.g. linux-image-6.1.0-56-amd64) is cached."""
    with cache_lock() as cache:
        store = cache / "kernel"
        store.mkdir(exist_ok=True)
        package = _resolve(meta)
        if package is not None:
            cached = load(store / package)
            if cached is not None:
                unpack_vmlinux(cached)
                return cached
        else:
            newest = newest_cached(store)
            if newest is not None:
                log.info("apt cannot resolve %s; reusing cached %s", meta, newest.package)
                return newest
        try:
            if package is None:
                raise HarnessError(f"apt-cache cannot resolve {meta}")
            return _fetch(cache, store, package)
        except HarnessError as first:
            log.info("%s; running apt-get update once and retrying", first.message)
            run(["apt-get", "update"], timeout=600)
            package = _resolve(meta)
            if package is None:
                raise HarnessError(
                    f"apt-cache cannot resolve {meta} even after apt-get update",
                    "check /etc/apt/sources.list for a bookworm main entry",
                ) from first
            return load(store / package) or _fetch(cache, store, package)


def _resolve(meta: str) -> str | None:
    """The real kernel package `meta` (a metapackage) depends on, per apt's lists."""
    deps = run(["apt-cache", "depends", meta], timeout=60, check=False)
    if not deps.ok:
        return None
    for line in deps.stdout.splitlines():
        kind, _, target = line.strip().lstrip("|").partition(": ")
        if kind == "Depends" and target.startswith("linux-image-"):
            return target.strip()
    return None


def mark_done(tree: Kernel) -> None:
    """Say that the tree is whole (written last: a tree without it is unfinished)."""
    (tree.root / _DONE).write_text(f"{tree.release} {tree.version}\n")


def load(tree: Path) -> Kernel | None:
    try:
        release, version = (tree / _DONE).read_text().split()
    except (OSError, ValueError):
        return None
    return Kernel(tree.name, version, release, tree)


def newest_cached(store: Path) -> Kernel | None:
    trees = [k for k in (load(p) for p in store.iterdir()) if k is not None]
    return max(trees, key=lambda k: k.root.stat().st_mtime, default=None)


def _fetch(cache: Path, store: Path, package: str) -> Kernel:
    debs = cache / "debs"
    debs.mkdir(exist_ok=True)
    for stale in debs.glob(f"{package}_*.deb"):
        stale.unlink()
    # As root apt would drop to _apt, which may not be able to write here; the
    # download itself is a plain fetch from the configured mirror.
    run(
        ["apt-get", "download", "-o", "APT::Sandbox::User=root", package],
        timeout=900,
        cwd=debs,
    )
    found = sorted(debs.glob(f"{package}_*.deb"))
    if len(found) != 1:
        raise HarnessError(f"apt-get download left {len(found)} {package} packages in {debs}")
    deb = found[0]
    version = deb.name.split("_")[1].replace("%3a", ":")
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=store))
    try:
        run(["dpkg-deb", "-x", deb, staging], timeout=600)
        releases = sorted(p.name for p in (staging / "lib" / "modules").iterdir())
        if len(releases) != 1:
            raise HarnessError(f"{deb.name} holds {len(releases)} module trees, expected one")
        release = releases[0]
        # Debian generates modules.dep in postinst, so the package does not ship it.
        run([sbin("depmod"), "-b", staging, release], timeout=300)
        shutil.rmtree(staging / "usr", ignore_errors=True)
        unpack_vmlinux(Kernel(package, version, release, staging))
        mark_done(Kernel(package, version, release, staging))
        final = store / package
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    deb.unlink()
    log.info("unpacked %s %s (release %s) into %s", package, version, release, final)
    return Kernel(package, version, release, final)


def sbin(tool: str) -> str:
    """`tool` from PATH, or from the sbin directories a non-login PATH may lack."""
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin") or tool


def unpack_vmlinux(kernel: Kernel) -> None:
    """Write the ELF kernel held compressed inside the bzImage (xz, as bookworm's; zstd, as trixie's),
    if the kernel can be entered through PVH; otherwise leave the bzImage as the boot image."""
    if kernel.vmlinux.is_file():
        return
    config = kernel.root / "boot" / f"config-{kernel.release}"
    if not config.is_file() or "CONFIG_PVH=y" not in config.read_text().splitlines():
        return
    elf = _embedded_elf(kernel.vmlinuz.read_bytes())
    if elf[:4] != b"\x7fELF":
        return
    partial = kernel.vmlinux.with_name(kernel.vmlinux.name + ".part")
    partial.write_bytes(elf)
    partial.rename(kernel.vmlinux)


def _embedded_elf(image: bytes) -> bytes:
    """The ELF in a bzImage's compressed stream, xz or zstd (what follows the stream, the bzImage's
    trailer, left alone); b"" where none is found. Each format's magic is tried where it first appears,
    the earlier first: a magic's bytes met by chance before the real stream read as no ELF."""
    def xz(data: bytes) -> bytes:
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)

    def zstd(data: bytes) -> bytes:
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)

    found = sorted((image.find(magic), unpack) for magic, unpack in ((b"\xfd7zXZ\x00", xz), (b"\x28\xb5\x2f\xfd", zstd))
                   if image.find(magic) >= 0)
    for start, unpack in found:
        try:
            elf = unpack(image[start:])
        except (lzma.LZMAError, zstandard.ZstdError):
            continue
        if elf[:4] == b"\x7fELF":
            return elf
    return b""


def attack_vectors(log_lines: list[str]) -> set[str]:
    """The attack vectors a kernel's log says it mitigates ("mitigations: Enabled attack vectors: a, b, ...
    SMT mitigations: auto"), from dmesg or a run's mitigation log; none for a kernel before 6.17, which
    prints no such line."""
    said = [x.split("Enabled attack vectors:", 1)[1] for x in log_lines if "Enabled attack vectors:" in x]
    assert len(said) <= 1, said
    return {v.strip() for v in said[0].split("SMT mitigations")[0].split(",") if v.strip()} if said else set()
