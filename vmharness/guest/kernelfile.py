"""A researcher's kernel, checked before anything is built or booted: a bzImage (its release read
from the setup header), an uncompressed vmlinux with a PVH entry (to boot), or a Debian kernel
package (to build an image with)."""

from __future__ import annotations

import lzma
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from vmharness import userfile
from vmharness.errors import HarnessError
from vmharness.system import proc

# x86 boot protocol (Documentation/arch/x86/boot.rst): 0xAA55 at 0x1fe, "HdrS" at 0x202, and at
# 0x20e the offset (minus 0x200) of a NUL-terminated version string: "6.1.0-50-amd64 (...) #1 SMP ...".
MAX_KERNEL = 1 << 30  # bytes: a kernel read whole (a vmlinux, a bzImage's payload unpacked)
_HINT = "pass the bzImage (arch/x86/boot/bzImage or /boot/vmlinuz-*), not vmlinux or a compressed copy"


def bzimage_release(path: Path) -> str:
    """The kernel release of a bzImage; HarnessError if the file is not one."""
    try:
        with path.open("rb") as f:
            head = f.read(0x210)
            if len(head) < 0x210 or head[0x1FE:0x200] != b"\x55\xaa" or head[0x202:0x206] != b"HdrS":
                raise HarnessError(f"{path} is not a Linux kernel (no x86 boot header)", _HINT)
            (offset,) = struct.unpack_from("<H", head, 0x20E)
            f.seek(offset + 0x200)
            text = f.read(256).split(b"\0", 1)[0].decode(errors="replace")
    except OSError as exc:
        raise HarnessError(f"cannot read kernel {path}: {exc.strerror}", "check the path") from exc
    release = text.split(" ", 1)[0]
    if not re.fullmatch(r"[0-9][\w.+~-]*", release):
        raise HarnessError(f"{path} has a boot header but no readable version string", _HINT)
    return release


_PT_NOTE = 4
_XEN_ELFNOTE_PHYS32_ENTRY = 18  # the PVH entry point QEMU needs to boot an uncompressed kernel


def _has_pvh_entry(data: bytes) -> bool:
    """An ELF64 note named "Xen" of type PHYS32_ENTRY in a PT_NOTE segment (False for an ELF cut short)."""
    try:
        return _pvh_note(data)
    except struct.error:
        return False


def _pvh_note(data: bytes) -> bool:
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        ph = phoff + i * phentsize
        p_type, = struct.unpack_from("<I", data, ph)
        if p_type != _PT_NOTE:
            continue
        offset, = struct.unpack_from("<Q", data, ph + 8)
        size, = struct.unpack_from("<Q", data, ph + 32)
        pos, end = offset, offset + size
        while pos + 12 <= end:
            namesz, descsz, kind = struct.unpack_from("<III", data, pos)
            name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and kind == _XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def _undo(payload: bytes) -> bytes | None:
    """A bzImage's payload decompressed, whole, if it is xz or gzip (the standard library's; a kernel
    built with zstd, lz4, lzo or bzip2 stays a bzImage); None if not, or if it is cut short."""
    d: lzma.LZMADecompressor | zlib._Decompress
    if payload.startswith(b"\xfd7zXZ\x00"):
        d = lzma.LZMADecompressor(lzma.FORMAT_XZ)
    elif payload.startswith(b"\x1f\x8b"):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    else:
        return None
    try:
        out = d.decompress(payload, MAX_KERNEL)  # at most: more is no kernel (and would fill memory)
    except (lzma.LZMAError, zlib.error):
        return None
    return out if d.eof else None


def uncompressed(bzimage: Path) -> bytes | None:
    """The vmlinux inside a bzImage, if QEMU can boot it directly (an ELF with a PVH entry: a TCG boot
    then skips decompressing the kernel, about 3 of its 12 seconds here); else None. The payload's
    place is in the setup header (boot protocol 2.08 and later: payload_offset at 0x248,
    payload_length at 0x24c, from the end of the setup sectors)."""
    data = userfile.read(bzimage, MAX_KERNEL, "a bzImage is some tens of MiB")
    if len(data) < 0x250 or data[0x202:0x206] != b"HdrS" or struct.unpack_from("<H", data, 0x206)[0] < 0x208:
        return None
    setup = ((data[0x1F1] or 4) + 1) * 512
    offset, length = struct.unpack_from("<II", data, 0x248)
    payload = data[setup + offset:setup + offset + length]
    elf = _undo(payload)
    return elf if elf is not None and elf[:5] == b"\x7fELF\x02" and _has_pvh_entry(elf) else None


def kernel_release(path: Path) -> str:
    """The release of a kernel QEMU can boot directly: a bzImage, or an uncompressed vmlinux with a
    PVH entry (which skips the decompression, a noticeable part of a TCG boot)."""
    try:
        with path.open("rb") as f:
            magic = f.read(5)
    except OSError as exc:
        raise HarnessError(f"cannot read kernel {path}: {exc.strerror}", "check the path") from exc
    if magic != b"\x7fELF\x02":
        return bzimage_release(path)
    data = userfile.read(path, MAX_KERNEL, "pass the bzImage, or a vmlinux without debug information")
    if not _has_pvh_entry(data):
        raise HarnessError(f"{path} is a vmlinux without a PVH entry point: QEMU cannot boot it directly",
                           "pass the bzImage, or build the kernel with CONFIG_PVH=y")
    m = re.search(rb"Linux version ([0-9][\w.+~-]*) ", data)
    if m is None:
        raise HarnessError(f"{path} has no Linux version string", _HINT)
    return m.group(1).decode()


def check_modules(modules: Path, release: str) -> None:
    if not (modules / "modules.order").exists() and not (modules / "kernel").is_dir():
        raise HarnessError(f"{modules} is not a modules tree (no modules.order, no kernel/)",
                           f"pass lib/modules/{release} as installed by `make modules_install`")
    if modules.name != release:
        raise HarnessError(f"modules folder {modules.name} does not match the kernel's release {release}",
                           f"pass the lib/modules/{release} built with this kernel")


@dataclass(frozen=True)
class DebKernel:
    path: Path
    package: str
    release: str


def deb_kernel(path: Path) -> DebKernel:
    """The package name and kernel release of a linux-image .deb."""
    if not path.is_file():
        raise HarnessError(f"no such package: {path}", "pass the path of a linux-image-*.deb")
    info = proc.run(["dpkg-deb", "--field", str(path), "Package"], timeout=60, check=False)
    if not info.ok:
        raise HarnessError(f"{path} is not a Debian package", "pass a linux-image-*.deb")
    listing = proc.run(["dpkg-deb", "--contents", str(path)], timeout=120).stdout
    found = re.findall(r"\./boot/vmlinuz-(\S+)", listing)
    if not found:
        raise HarnessError(f"{path} ({info.stdout.strip()}) holds no /boot/vmlinuz-*",
                           "pass the linux-image package, not the headers or a meta-package")
    return DebKernel(path.resolve(), info.stdout.strip(), found[0])
