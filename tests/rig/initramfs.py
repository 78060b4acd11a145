"""L1's initramfs: static busybox, the few modules that reach L0's root, and l1-init.sh.

Built in memory, gzip-compressed, and kept in the cache under the hash of its content."""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import re
import tempfile
from pathlib import Path

from tests.rig import cpio, topology
from tests.rig.kernel import Kernel
from tests.rig.paths import cache_lock
from vmharness.errors import HarnessError
from vmharness.system.proc import run

BUSYBOX = Path("/bin/busybox")
INIT_TEMPLATE = Path(__file__).with_name("l1-init.sh")

# What init loads, before it can see anything on L0. Dependencies come from modules.dep.
MODULES = ("virtio_pci", "virtio_console", "9pnet_virtio", "9p", "overlay", "e1000e", "vmxnet3")

MODPROBE_HELPER = '#!/bin/busybox sh\nexec chroot /host /sbin/modprobe "$@"\n'

_COMPRESSED = (".xz", ".zst", ".gz")
_PT_INTERP = 3
_KEEP = 4  # initramfs builds kept in the cache


def build(kernel: Kernel) -> Path:
    """Return the path of the (cached) initramfs for `kernel`."""
    return cached(cpio.archive(_entries(kernel)), "initramfs")


def cached(data: bytes, kind: str) -> Path:
    """Store the cpio archive `data` gzip-compressed in `<cache>/<kind>/` under the hash of
    its content, unless it is there already, and return its path; the newest few are kept."""
    digest = hashlib.sha256(data).hexdigest()[:24]
    with cache_lock() as cache:
        store = cache / kind
        store.mkdir(exist_ok=True)
        target = store / f"{digest}.cpio.gz"
        if not target.is_file():
            fd, staging = tempfile.mkstemp(prefix=".build-", dir=store)
            with os.fdopen(fd, "wb") as fh:
                fh.write(gzip.compress(data, compresslevel=6, mtime=0))
                os.fchmod(fh.fileno(), 0o644)
            os.replace(staging, target)
        os.utime(target)  # the newest files are the ones in use; prune the rest
        for old in sorted(store.glob("*.cpio.gz"), key=lambda p: p.stat().st_mtime)[:-_KEEP]:
            old.unlink()
    return target


def load_order(modules_dir: Path, wanted: tuple[str, ...]) -> list[str]:
    """Paths (relative to `modules_dir`) of `wanted` and their dependencies, each after
    everything it needs, from the kernel's modules.dep."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
        by_name[_module_name(path)] = path
    order: list[str] = []

    def visit(path: str, chain: tuple[str, ...]) -> None:
        if path in order:
            return
        if path in chain:
            raise HarnessError(f"modules.dep has a cycle through {path}")
        for dep in deps.get(path, []):
            visit(dep, (*chain, path))
        order.append(path)

    builtin = _builtin(modules_dir)
    for name in wanted:
        found = by_name.get(name.replace("-", "_"))
        if found is None and name.replace("-", "_") in builtin:
            continue  # built into this kernel (trixie's 7.x has virtio_pci and virtio_console in it)
        if found is None:
            raise HarnessError(
                f"module {name} is not in {modules_dir}",
                "the kernel may build it in; drop it from tests.rig.initramfs.MODULES",
            )
        visit(found, ())
    return order


def _builtin(modules_dir: Path) -> set[str]:
    """The modules the kernel has built in (its modules.builtin; none where it has no such file)."""
    try:
        return {_module_name(line) for line in (modules_dir / "modules.builtin").read_text().splitlines()}
    except FileNotFoundError:
        return set()


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    for suffix in _COMPRESSED:
        base = base.removesuffix(suffix)
    return base.removesuffix(".ko").replace("-", "_")


def _module_bytes(path: Path) -> bytes:
    """The plain ELF object: busybox insmod does not decompress."""
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes())
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes())
    if path.suffix == ".zst":
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "module.ko"
            run(["zstd", "-q", "-d", "-o", out, path], timeout=60)
            return out.read_bytes()
    return path.read_bytes()


def _is_static(elf: bytes) -> bool:
    """True when the ELF64 executable has no program interpreter (PT_INTERP)."""
    if elf[:5] != b"\x7fELF\x02":
        return False
    phoff = int.from_bytes(elf[0x20:0x28], "little")
    phentsize = int.from_bytes(elf[0x36:0x38], "little")
    phnum = int.from_bytes(elf[0x38:0x3A], "little")
    for i in range(phnum):
        start = phoff + i * phentsize
        if int.from_bytes(elf[start : start + 4], "little") == _PT_INTERP:
            return False
    return True


def _init_script(kernel: Kernel, modules: list[str]) -> str:
    values = {
        "MODULES": " ".join(modules),
        "RELEASE": kernel.release,
        "MSIZE": str(topology.NINEP_MSIZE),
        "HOSTNAME": topology.HOSTNAME,
        "NIC0_MAC": topology.NICS[0].mac,
        "NIC0_ADDR": topology.NIC0_ADDR,
        "GATEWAY": topology.GATEWAY,
        "AGENT_PORT": topology.AGENT_PORT,
        "CACHED_TAG": topology.CACHED_TAG,
        "PERSIST_TAG": topology.PERSIST_TAG,
    }
    text = INIT_TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    left = re.findall(r"@[A-Z0-9_]+@", text)
    if left:
        raise HarnessError(f"{INIT_TEMPLATE.name} has placeholders nobody fills: {left}")
    return text


def busybox() -> bytes:
    """The static busybox binary every initramfs of the rig is built around."""
    if not BUSYBOX.is_file():
        raise HarnessError(f"{BUSYBOX} is missing", "apt-get install busybox-static")
    binary = BUSYBOX.read_bytes()
    if not _is_static(binary):
        raise HarnessError(f"{BUSYBOX} is dynamically linked", "apt-get install busybox-static")
    return binary


def plain_name(rel: str) -> str:
    """A module's path without its compression suffix (busybox insmod takes the plain ELF)."""
    for suffix in _COMPRESSED:
        rel = rel.removesuffix(suffix)
    return rel


def module_entries(kernel: Kernel, paths: list[str]) -> list[cpio.Entry]:
    """lib/modules/<release>/... for the modules at `paths` (from load_order), decompressed."""
    entries: list[cpio.Entry] = []
    made: set[str] = set()
    for rel in paths:
        parts = f"lib/modules/{kernel.release}/{plain_name(rel)}".split("/")
        for depth in range(2, len(parts)):
            parent = "/".join(parts[:depth])
            if parent not in made:
                made.add(parent)
                entries.append(cpio.directory(parent))
        entries.append(cpio.file("/".join(parts), _module_bytes(kernel.modules / rel)))
    return entries


def _entries(kernel: Kernel) -> list[cpio.Entry]:
    paths = load_order(kernel.modules, MODULES)
    entries = [
        cpio.directory(d) for d in ("bin", "dev", "etc", "host", "lib", "proc", "root", "run", "sbin", "sys", "tmp")
    ]
    entries.append(cpio.chardev("dev/console", 5, 1))
    entries.append(cpio.file("bin/busybox", busybox(), 0o755))
    entries.append(cpio.file("sbin/rig-modprobe", MODPROBE_HELPER.encode(), 0o755))
    entries.append(cpio.file("init", _init_script(kernel, [plain_name(p) for p in paths]).encode(), 0o755))
    return entries + module_entries(kernel, paths)
