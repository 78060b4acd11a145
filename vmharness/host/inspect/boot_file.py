"""A host boot's kernel and initrd (`[[host_boot]]`, model/hostboots.py), checked on this machine before
anything is taken: kexec will boot the host into them, so they are held to more than a QEMU binary.

- Not a symlink where the configuration names it: what a link leads to can change between this check
  and `kexec -l`, and the record should name the file that booted. The folders on the way to it, as
  written and as resolved, can be changed by root alone (host/inspect/qemu_binary.py's rule).
- A regular file (not a folder, a FIFO, a device such as /dev/zero), owned by root (or whoever runs the
  harness) and writable by no one else, that can be opened and read, of at most its cap; its sha256
  goes into what the run shows and records.
- A kernel is a bzImage: the boot protocol's header ("HdrS" at 0x202) and the version string it points
  to, whose first word is the release the host must report once it is running (/proc/sys/kernel/osrelease,
  checked on arrival: experiment/hostboots/arrival.py)."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Any

from vmharness import textsafe
from vmharness.errors import HarnessError
from vmharness.host.inspect.qemu_binary import root_file, root_only_place

KERNEL_MAX = 256 << 20  # bytes: a distribution's bzImage is about 8 to 12 MiB
INITRD_MAX = 2 << 30  # bytes: an initramfs with every firmware is some hundreds of MiB
HINT_PLACE = "keep the kernel in a folder only root can write (e.g. /boot), and name the file itself there"
_HDR = 0x202  # "HdrS": the boot protocol's header (Documentation/arch/x86/boot.rst)
_VERSION_PTR = 0x20E  # two bytes: where the version string is, less 0x200
_HEAD = 1 << 16  # bytes read for the header and its version string


@dataclass(frozen=True)
class BootFile:
    path: str
    size: int
    sha256: str
    release: str  # a kernel's, from its header; "" for an initrd

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "release": self.release}


def _refuse(where: str, path: str, what: str, hint: str = HINT_PLACE) -> HarnessError:
    return HarnessError(f"{where} {path[:200]}: {what}", hint)


def release_of(head: bytes) -> str | None:
    """The release a bzImage's header names ("6.1.0-18-amd64"), or None when `head` is no bzImage."""
    if head[_HDR:_HDR + 4] != b"HdrS" or len(head) < _VERSION_PTR + 2:
        return None
    at = int.from_bytes(head[_VERSION_PTR:_VERSION_PTR + 2], "little") + 0x200
    text = head[at:at + 256].split(b"\0", 1)[0].decode("ascii", errors="replace")
    word = text.split(" ", 1)[0]
    return word if word and textsafe.line(word) == word and len(word) <= 64 else None


def check(path: str, where: str, kernel: bool) -> BootFile:
    """The file at `path` checked as the top says, or one HarnessError naming `where` (the key)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise _refuse(where, path, f"cannot be found ({exc.strerror})", "fix the path") from None
    if stat.S_ISLNK(st.st_mode):
        shown = textsafe.line(os.readlink(path)[:120])
        raise _refuse(where, path, f"is a symlink (-> {shown}): what it leads to could change before kexec loads it",
                      "name the file itself, not a link to it")
    root_only_place(path, where, "fix the path", "the file could be swapped before kexec loads it", HINT_PLACE)
    root_file(st, where, path, "", "name the kernel's bzImage (or its initramfs) itself", HINT_PLACE)
    cap = KERNEL_MAX if kernel else INITRD_MAX
    if st.st_size > cap:
        raise _refuse(where, path, f"is larger than {cap} bytes", "name the kernel's bzImage or its initramfs")
    digest, head = _read(path, where)
    release = ""
    if kernel:
        found = release_of(head)
        if found is None:
            raise _refuse(where, path, "is not a bzImage (no x86 boot header with a version in it)",
                          "name the kernel's bzImage (arch/x86/boot/bzImage, /boot/vmlinuz-*), not a vmlinux")
        release = found
    return BootFile(path, st.st_size, digest, release)


def _read(path: str, where: str) -> tuple[str, bytes]:
    """The file's sha256 and its first _HEAD bytes, read without following a link or blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _refuse(where, path, f"cannot be read ({exc.strerror})", "run as root, or fix its mode") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the check
            raise _refuse(where, path, "changed while it was checked", "run again")
        h, head = hashlib.sha256(), b""
        while chunk := os.read(fd, 1 << 20):
            head = head or chunk[:_HEAD]
            h.update(chunk)
        return h.hexdigest(), head
    finally:
        os.close(fd)
