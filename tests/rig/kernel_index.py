"""A second kernel for L1, from another Debian suite than this machine's: trixie-backports'
`linux-image-amd64` (7.3 in December 2026), which has the attack-vector controls
(`mitigations=auto,no_guest_host`, Linux 6.17 on). It is fetched through that suite's Packages index on
the mirror, with no apt source added to this machine and nothing installed, each package checked
against the index's SHA256, and unpacked into the rig's cache in the layout kernel.py gives bookworm's:
boot/vmlinuz-R, boot/config-R, lib/modules/R with depmod's files, and the ELF beside the bzImage.

Since 7.x Debian splits the kernel: linux-image-R is empty and depends on linux-binary-R (vmlinuz),
linux-modules-R (the modules, .ko.xz) and linux-base-R (config, System.map, modules.builtin), all under
usr/lib/modules/R. The index is read with python-debian."""

from __future__ import annotations

import hashlib
import logging
import lzma
import shutil
import tempfile
import urllib.request
from pathlib import Path

from debian import deb822

from tests.rig import kernel
from tests.rig.kernel import Kernel
from tests.rig.paths import cache_lock
from vmharness.errors import HarnessError
from vmharness.guest.recipe import host_mirror
from vmharness.system.proc import run

log = logging.getLogger("tests.rig.kernel_index")

SUITE = "trixie-backports"
PARTS = ("linux-binary-", "linux-modules-", "linux-base-")  # what linux-image-R depends on, from 7.x
INDEX_CAP = 64 << 20  # bytes, decompressed
DEB_CAP = 512 << 20
TIMEOUT = 600  # seconds for one download


def obtain(suite: str = SUITE, meta: str = kernel.META_PACKAGE) -> Kernel:
    """The kernel `meta` names in `suite`, unpacked into the rig's cache unless a tree of that package
    (its ABI name) and version is there already; where the index cannot be fetched, the newest tree
    cached (as kernel.obtain falls back where apt cannot resolve)."""
    mirror = host_mirror(suite.split("-")[0])
    with cache_lock() as cache:
        store = cache / f"kernel-{suite}"  # apart from kernel.py's, whose newest tree is its fallback
        store.mkdir(exist_ok=True)
        try:
            index = packages(_index_text(f"{mirror}/dists/{suite}/main/binary-amd64/Packages.xz"))
        except OSError as exc:  # the mirror out of reach: the tree fetched last, if there is one
            newest = kernel.newest_cached(store)
            if newest is None:
                raise HarnessError(f"{suite}'s index could not be fetched from {mirror}: {exc}",
                                   "check the network; nothing of that suite is cached") from exc
            log.info("%s's index could not be fetched (%s); reusing cached %s", suite, exc, newest.package)
            return newest
        image = _depends_on(index, meta, "linux-image-")
        cached = kernel.load(store / image)
        if cached is not None and cached.version == index[image]["Version"]:
            return cached
        return _unpack(store, mirror, index, image)


def packages(text: str) -> dict[str, deb822.Packages]:
    """A Packages index by package name (the last stanza of a name, as apt would take the newest)."""
    stanzas = deb822.Packages.iter_paragraphs(text.splitlines(), use_apt_pkg=False)
    return {p["Package"]: p for p in stanzas if "Package" in p}


def _depends_on(index: dict[str, deb822.Packages], name: str, prefix: str) -> str:
    if name not in index:
        raise HarnessError(f"the index has no package {name}", "check the suite's name and the mirror")
    for alternatives in index[name].relations.get("depends") or []:
        for dep in alternatives:
            if dep["name"].startswith(prefix):
                return str(dep["name"])
    raise HarnessError(f"{name} depends on no {prefix}* package", "the suite's kernel packages changed")


def parts(index: dict[str, deb822.Packages], image: str) -> list[str]:
    """The packages that hold the kernel `image` names: itself where it is not empty (before 7.x), else
    the three it depends on."""
    abi = image.removeprefix("linux-image-")
    split = [f"{p}{abi}" for p in PARTS]
    return [image, *split] if all(p in index for p in split) else [image]


def _unpack(store: Path, mirror: str, index: dict[str, deb822.Packages], image: str) -> Kernel:
    version = str(index[image]["Version"])
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=store))
    try:
        for name in parts(index, image):
            entry = index[name]
            deb = staging / f"{name}.deb"
            deb.write_bytes(_get(f"{mirror}/{entry['Filename']}", DEB_CAP, sha256=str(entry["SHA256"])))
            run(["dpkg-deb", "-x", deb, staging], timeout=600)
            deb.unlink()
        release = _lay_out(staging)
        run([kernel.sbin("depmod"), "-b", staging, release], timeout=300)
        tree = Kernel(image, version, release, staging)
        kernel.unpack_vmlinux(tree)
        kernel.mark_done(tree)
        final = store / image
        shutil.rmtree(final, ignore_errors=True)  # an older version of the same ABI
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("unpacked %s %s (release %s) from its suite's index into %s", image, version, release, final)
    return Kernel(image, version, release, final)


def _lay_out(root: Path) -> str:
    """Move usr/lib/modules/R (where 7.x's packages put everything) to lib/modules/R, and its vmlinuz and
    config to boot/ as vmlinuz-R and config-R; an older package's layout is left as it is. The release."""
    moved = root / "usr" / "lib" / "modules"
    if moved.is_dir():
        (root / "lib").mkdir(exist_ok=True)
        moved.rename(root / "lib" / "modules")
    releases = sorted(p.name for p in (root / "lib" / "modules").iterdir())
    if len(releases) != 1:
        raise HarnessError(f"the packages hold {len(releases)} module trees, expected one")
    release = releases[0]
    tree = root / "lib" / "modules" / release
    (root / "boot").mkdir(exist_ok=True)
    for name in ("vmlinuz", "config", "System.map"):
        if (tree / name).is_file():
            (tree / name).rename(root / "boot" / f"{name}-{release}")
    if not (root / "boot" / f"vmlinuz-{release}").is_file():
        raise HarnessError(f"the packages of {release} hold no vmlinuz")
    shutil.rmtree(root / "usr", ignore_errors=True)
    return release


def _get(url: str, cap: int, sha256: str = "") -> bytes:
    """The body at `url` (at most `cap` bytes), checked against `sha256` where given."""
    with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
        body: bytes = resp.read(cap + 1)
    if len(body) > cap:
        raise HarnessError(f"{url} is larger than {cap >> 20} MiB")
    if sha256 and hashlib.sha256(body).hexdigest() != sha256:
        raise HarnessError(f"{url} does not match its index's SHA256", "fetch it again; the mirror may be syncing")
    return body


def _index_text(url: str) -> str:
    """An xz-compressed Packages index, as text (at most INDEX_CAP bytes of it)."""
    out = lzma.LZMADecompressor().decompress(_get(url, INDEX_CAP), INDEX_CAP + 1)
    if len(out) > INDEX_CAP:
        raise HarnessError(f"{url} holds an index larger than {INDEX_CAP >> 20} MiB")
    return out.decode()
