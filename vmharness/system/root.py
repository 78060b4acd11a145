"""HostRoot: every read and write of host state (sysfs, procfs, /dev, /lib/modules) goes through here.

The root is `/` on a live host, or a directory laid out like `/` (a `host-snapshot`, a tree built by a
test). Paths given to its methods are absolute host paths ("/sys/bus/pci/devices"); symlinks inside the
root are relative, as in real sysfs, so they resolve inside it.

Reads take regular files only, and at most `MAX_READ` bytes: a FIFO or a device node in a snapshot
would block a read forever (or act on a device), and a huge file would fill memory. Real sysfs and
procfs attributes are regular files, so nothing the harness needs is refused. Nothing is written
under a root that is not the live host, unless a test asks for it: a `--host-root` tree is read-only.
Every change is logged at debug level (`-v`), as every command run is.

`recording()` is a test hook: it collects every host path any HostRoot resolves while it is open, so a
test can prove that a `host-snapshot` holds all that a command read. Off (the default) it costs one
`is None` check per path.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vmharness import digits, environ
from vmharness.errors import HarnessError
from vmharness.userfile import MAX_READ, read_file

ENV_VAR = "VMHARNESS_HOST_ROOT"
LARGE_READ = 64 << 20  # /proc/interrupts, /proc/cpuinfo, modules.dep: megabytes on a host of many CPUs

log = logging.getLogger("vmharness.host")

_ABSENT = (errno.ENOENT, errno.ENOTDIR)
_REFUSED_BY_KERNEL = (errno.EINVAL, errno.EIO, errno.ENODEV, errno.ENXIO, errno.EACCES, errno.EPERM,
                     errno.ESRCH)  # ESRCH: /proc/PID of a process that just ended


_reads: set[str] | None = None  # the paths resolved while recording() is open


@contextmanager
def recording() -> Iterator[set[str]]:
    """Collect the host path ("/sys/...") of every path a HostRoot resolves inside the block."""
    global _reads
    outer, _reads = _reads, set()
    try:
        yield _reads
    finally:
        _reads = outer


def check_tree_name(name: str, where: str) -> str:
    """A name read from a host tree (a directory entry, a link's target, a driver or interface name),
    refused when it holds a control character: a driver name with a newline in it would add a line of
    its own to the modprobe.d text host-setup prints, an escape sequence would act on the terminal."""
    if environ.CONTROL.search(name):
        raise HarnessError(f"{where} names {name[:60]!r}, which holds a control character",
                           "the host root is damaged: the kernel's names hold none")
    return name


class HostRoot:
    def __init__(self, base: str | Path = "/", *, allow_writes: bool = False) -> None:
        self.base = Path(base).resolve()
        self.live = self.base == Path("/")
        self.allow_writes = allow_writes or self.live

    @classmethod
    def open(cls, base: str | Path | None = None) -> HostRoot:
        """The root named on the command line or in VMHARNESS_HOST_ROOT, checked to be one."""
        env = environ.get(ENV_VAR) if base is None else None
        chosen = base if base is not None else env if env is not None else "/"
        if str(chosen).strip() == "":
            where = "--host-root" if base is not None else ENV_VAR
            raise HarnessError(f"{where} is empty", "name a directory laid out like / (an unpacked "
                               f"host-snapshot), or leave {where} out for this host")
        path = Path(chosen)
        if not path.is_dir():
            raise HarnessError(
                f"host root {chosen} is not a directory",
                "pass the directory an unpacked host-snapshot tarball made",
            )
        root = cls(path)
        missing = [d for d in ("sys", "proc") if not (path / d).is_dir()]
        if not root.live and missing:
            raise HarnessError(
                f"host root {chosen} has no {missing[0]}/ directory: it is not laid out like /",
                "unpack a host-snapshot tarball (tar xzf snap.tar.gz -C DIR) and pass DIR",
            )
        return root

    def __repr__(self) -> str:
        return f"HostRoot({str(self.base)!r})"

    def path(self, p: str | Path) -> Path:
        rel = str(p).lstrip("/")
        if "\0" in rel:  # no file has such a name: the path was built from a damaged file's content
            raise HarnessError(f"{str(p)[:80]!r} holds a NUL byte: it cannot name a file",
                               "a file it was built from is damaged")
        if _reads is not None:
            _reads.add("/" + rel)
        return self.base / rel if rel else self.base

    def host_path(self, real: Path) -> str:
        """The host path ("/sys/...") of a path inside this root."""
        return "/" + str(real.relative_to(self.base)) if real != self.base else "/"

    # reads -----------------------------------------------------------------------------------
    def exists(self, p: str | Path) -> bool:
        return os.path.lexists(self.path(p))

    def is_dir(self, p: str | Path) -> bool:
        return self._inside(p).is_dir()

    def _inside(self, p: str | Path) -> Path:
        """The path of p under the root; off the live host, refused unless it resolves inside it."""
        real = self.path(p)
        if not self.live:
            self.realpath(p)
        return real

    def fault(self, p: str | Path, exc: OSError, verb: str = "read") -> HarnessError:
        """An OSError met on `p` as one line naming it and the fault, then a hint."""
        damaged = "the host root is damaged: unpack the snapshot again, or take a new one"
        if isinstance(exc, PermissionError):
            return HarnessError(f"no permission to {verb} {p}", "run as root (sudo)")
        if exc.errno == errno.ELOOP:
            where = "" if self.live else f" under host root {self.base}"
            return HarnessError(f"cannot {verb} {p}{where}: a symlink loop (a link on the way leads back to itself)",
                                "look at the links on that path (ls -l)" if self.live else damaged)
        return HarnessError(f"cannot {verb} {p}: {exc.strerror or exc}",
                            "vmharness -v shows what was read before it" if self.live else damaged)

    def read_bytes(self, p: str | Path, *, limit: int = MAX_READ) -> bytes:
        try:
            return read_file(self._inside(p), str(p), limit)
        except OSError as exc:
            if exc.errno in _ABSENT:
                raise HarnessError(
                    f"{p} is missing under host root {self.base}",
                    "this kernel may be too old for vmharness, or the host root is incomplete",
                ) from exc
            raise self.fault(p, exc) from exc

    def read_text(self, p: str | Path, *, limit: int = MAX_READ) -> str:
        return self.read_bytes(p, limit=limit).decode(errors="replace")

    def read_optional(self, p: str | Path, *, limit: int = MAX_READ) -> str | None:
        """The file's text stripped, or None if it does not exist (an attribute an old kernel lacks)
        or cannot be read (some sysfs attributes refuse reads on some devices). A file that is not a
        regular one, or too big, is an error all the same."""
        try:
            return read_file(self._inside(p), str(p), limit).decode(errors="replace").strip()
        except OSError as exc:
            if exc.errno in _ABSENT or exc.errno in _REFUSED_BY_KERNEL:
                return None
            raise self.fault(p, exc) from exc

    def read_int(self, p: str | Path, *, minimum: int | None = None) -> int | None:
        """A file that holds one integer (a sysfs count, a NUMA node): None as read_optional gives
        None; a value that is no integer, or below `minimum`, is an error naming the file and value."""
        text = self.read_optional(p)
        if text is None:
            return None
        value = digits.integer(text, signed=minimum is None or minimum < 0)
        if value is None or (minimum is not None and value < minimum):
            raise HarnessError(f"{p} holds {text[:40]!r}, not " + (
                "an integer" if minimum is None else "a count" if minimum == 0 else f"an integer >= {minimum}"),
                "the host root is damaged, or this kernel writes something vmharness does not know")
        return value

    def listdir(self, p: str | Path) -> list[str]:
        """Sorted entries of a directory; an absent directory is empty. An entry whose name holds a
        control character is refused, naming the directory: the kernel's names (devices, drivers,
        interfaces, IRQs) end up in files the harness prints and in its errors."""
        try:
            names = sorted(os.listdir(self._inside(p)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise self.fault(p, exc, "list") from exc
        for name in names:
            check_tree_name(name, f"an entry of {p}")
        return names

    def readlink_name(self, p: str | Path) -> str | None:
        """The last component of a symlink's target ("e1000e" for .../drivers/e1000e), or None; one
        that holds a control character is refused, naming the link."""
        try:
            name = os.path.basename(os.readlink(self.path(p)))
        except OSError:
            return None
        return check_tree_name(name, f"the link {p}")

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

    # writes: refused off the live host, each one logged ---------------------------------------
    def writable(self, p: str | Path, what: str = "write") -> Path:
        """The real path to change, once changes are allowed here (the live host, or a test's tree)."""
        if not self.allow_writes:
            raise HarnessError(
                f"refusing to {what} {p} under host root {self.base}: it is not the live host",
                "inspection and --dry-run work on a snapshot; changes need the real host (no --host-root)",
            )
        return self._inside(p)

    def write_text(self, p: str | Path, text: str) -> None:
        real = self.writable(p)
        log.debug("write %s: %r", p, text)
        try:
            with open(real, "w") as f:
                f.write(text)
        except PermissionError as exc:
            raise HarnessError(f"no permission to write {p}", "run as root (sudo)") from exc
        except OSError as exc:
            raise HarnessError(f"the kernel refused {text.strip()!r} -> {p}: {exc.strerror}") from exc

    def _change(self, p: str | Path, verb: str, action: Callable[[Path], object]) -> None:
        """Run `action` on the real path of `p` (a change: refused off the live host, logged), with
        its failure as one line."""
        real = self.writable(p, verb)
        log.debug("%s %s", verb, p)
        try:
            action(real)
        except PermissionError as exc:
            raise HarnessError(f"no permission to {verb} {p}", "run as root (sudo)") from exc
        except OSError as exc:
            raise HarnessError(f"cannot {verb} {p}: {exc.strerror}") from exc

    def mkdir(self, p: str | Path, mode: int = 0o755) -> None:
        """Create a directory and its parents (nothing if it exists)."""
        if not self.writable(p, "create").is_dir():
            self._change(p, "create", lambda real: real.mkdir(parents=True, exist_ok=True, mode=mode))

    def remove(self, p: str | Path) -> None:
        """Unlink a file; one already gone is fine."""
        self._change(p, "remove", lambda real: real.unlink(missing_ok=True))

    def rmdir(self, p: str | Path) -> None:
        """Remove an empty directory; one already gone is fine."""
        def rmdir(real: Path) -> None:
            if real.is_dir():
                real.rmdir()
        self._change(p, "remove", rmdir)
