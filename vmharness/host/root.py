"""HostRoot: every read and write of host state (sysfs, procfs, /dev, /lib/modules) goes through here.

The root is `/` on a live host, or a directory laid out like `/` (a `host-snapshot`, a tree built by a
test). Paths given to its methods are absolute host paths ("/sys/bus/pci/devices"); symlinks inside the
root are relative, as in real sysfs, so they resolve inside it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from vmharness.errors import HarnessError

ENV_VAR = "VMHARNESS_HOST_ROOT"


class HostRoot:
    def __init__(self, base: str | Path = "/", *, allow_writes: bool = False) -> None:
        self.base = Path(base).resolve()
        self.live = self.base == Path("/")
        self.allow_writes = allow_writes or self.live

    @classmethod
    def open(cls, base: str | Path | None = None) -> HostRoot:
        """The root named on the command line or in VMHARNESS_HOST_ROOT, checked to be one."""
        chosen = base if base is not None else os.environ.get(ENV_VAR) or "/"
        path = Path(chosen)
        if not path.is_dir():
            raise HarnessError(
                f"host root {chosen} is not a directory",
                "pass the directory an unpacked host-snapshot tarball made",
            )
        root = cls(path)
        if not root.live and not (path / "sys").is_dir():
            raise HarnessError(
                f"host root {chosen} has no sys/ directory: it is not laid out like /",
                "unpack a host-snapshot tarball (tar xzf snap.tar.gz -C DIR) and pass DIR",
            )
        return root

    def __repr__(self) -> str:
        return f"HostRoot({str(self.base)!r})"

    def path(self, p: str | Path) -> Path:
        rel = str(p).lstrip("/")
        return self.base / rel if rel else self.base

    def host_path(self, real: Path) -> str:
        """The host path ("/sys/...") of a path inside this root."""
        return "/" + str(real.relative_to(self.base)) if real != self.base else "/"

    # reads -----------------------------------------------------------------------------------
    def exists(self, p: str | Path) -> bool:
        return os.path.lexists(self.path(p))

    def is_dir(self, p: str | Path) -> bool:
        return self.path(p).is_dir()

    def read_text(self, p: str | Path) -> str:
        try:
            return self.path(p).read_text(errors="replace")
        except PermissionError as exc:
            raise HarnessError(f"no permission to read {p}", "run as root (sudo)") from exc
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise HarnessError(
                    f"{p} is missing under host root {self.base}",
                    "this kernel may be too old for vmharness, or the host root is incomplete",
                ) from exc
            raise HarnessError(f"cannot read {p}: {exc.strerror}") from exc

    def read_optional(self, p: str | Path) -> str | None:
        """The file's text stripped, or None if it does not exist (an attribute an old kernel lacks)
        or cannot be read (some sysfs attributes refuse reads on some devices)."""
        try:
            return self.path(p).read_text(errors="replace").strip()
        except PermissionError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EINVAL, errno.EIO, errno.ENODEV):
                return None
            raise HarnessError(f"cannot read {p}: {exc.strerror}") from exc

    def read_bytes(self, p: str | Path) -> bytes:
        try:
            return self.path(p).read_bytes()
        except PermissionError as exc:
            raise HarnessError(f"no permission to read {p}", "run as root (sudo)") from exc

    def listdir(self, p: str | Path) -> list[str]:
        """Sorted entries of a directory; an absent directory is empty."""
        try:
            return sorted(os.listdir(self.path(p)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except PermissionError as exc:
            raise HarnessError(f"no permission to list {p}", "run as root (sudo)") from exc

    def readlink_name(self, p: str | Path) -> str | None:
        """The last component of a symlink's target ("e1000e" for .../drivers/e1000e), or None."""
        try:
            return os.path.basename(os.readlink(self.path(p)))
        except OSError:
            return None

    def realpath(self, p: str | Path) -> str:
        """The host path a path resolves to, following relative symlinks inside the root."""
        real = Path(os.path.realpath(self.path(p)))
        try:
            return self.host_path(real)
        except ValueError as exc:
            raise HarnessError(
                f"{p} points outside host root {self.base}",
                "snapshot symlinks must be relative, as in real sysfs",
            ) from exc

    # writes ----------------------------------------------------------------------------------
    def write_text(self, p: str | Path, text: str) -> None:
        if not self.allow_writes:
            raise HarnessError(
                f"refusing to write {p} under host root {self.base}: it is not the live host",
                "inspection and --dry-run work on a snapshot; changes need the real host (no --host-root)",
            )
        try:
            with open(self.path(p), "w") as f:
                f.write(text)
        except PermissionError as exc:
            raise HarnessError(f"no permission to write {p}", "run as root (sudo)") from exc
        except OSError as exc:
            raise HarnessError(f"the kernel refused {text.strip()!r} -> {p}: {exc.strerror}") from exc
