"""The one way vmharness writes into a folder a user named: only into a folder it made or verified as
its own, never through a link, never over a file it did not write.

vmharness runs as root, and the folders it writes into are named by a user or come with data from
someone else: `report --out`, a run directory (`--out`, `--resume`), `--image-dir`. Opened by path,
`out/report.txt` follows a symlink to /etc/shadow and writes through a hard link into whatever file
shares its inode; a folder a report never wrote may hold the user's own `report.md`. So:

- **Owned folders.** `claim` makes a folder (its parents too) and writes a marker in it, `.vmharness`,
  naming what owns it (`vmharness report`). An existing folder is the harness's when it holds that
  marker naming the same owner, when it is empty (nothing to overwrite: it is marked then), or when
  the caller recognises it as one written before markers existed (`legacy`). Anything else is refused
  unless the user says `--force`, which writes there without marking it. The folder named must not be
  a symlink, and a folder under /proc, /sys or /dev is refused whatever is said.
- **No links.** Each write opens the folder without following a link in its last component
  (O_NOFOLLOW | O_DIRECTORY) and reaches its files relative to that descriptor. A file is replaced by
  a new temporary file (O_EXCL: never an existing one) renamed over its name, so a link there is
  replaced, never written through; it is appended to only if it is a regular file with one name,
  opened without following a symlink. A symlink, a hard link or a special file at a name is refused
  all the same (someone put it there); `--force` lets a replacement go over it, never an append.
- **Durable.** Every file written is fsynced, and so is the folder after a rename.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.userfile import kind_of

MARKER = ".vmharness"
_KERNEL_FS = ("/proc", "/sys", "/dev")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SHOWN = 3  # foreign entries named in a refusal


def _kind(mode: int) -> str:
    return "a folder" if stat.S_ISDIR(mode) else kind_of(mode)


def _text(owner: str) -> bytes:
    return f"vmharness {owner}\n".encode()


def _marked(dfd: int) -> str | None:
    """The owner the marker in the open folder names; None without a marker that is a small regular
    file (a link or anything else is no marker)."""
    try:
        st = os.lstat(MARKER, dir_fd=dfd)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > 256:
        return None
    fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    try:
        text = os.read(fd, 256).decode(errors="replace")
    finally:
        os.close(fd)
    return text.strip().removeprefix("vmharness ") if text.startswith("vmharness ") else None


def marked(path: Path) -> str | None:
    """The owner named by the marker of the folder at `path` (not followed if a link); None if none."""
    try:
        dfd = os.open(path, _DIR_FLAGS)
    except OSError:
        return None
    try:
        return _marked(dfd)
    finally:
        os.close(dfd)


@dataclass(frozen=True)
class Folder:
    """A folder the harness owns (or was told to write into with --force): every write goes here."""

    path: Path
    flag: str  # how errors name it: "--out runs/x"
    force: bool = False

    @contextlib.contextmanager
    def _opened(self) -> Iterator[int]:
        dfd = os.open(self.path, _DIR_FLAGS)
        try:
            yield dfd
        finally:
            os.close(dfd)

    def _refuse(self, name: str, what: str, can_force: bool) -> HarnessError:
        return HarnessError(f"{self.flag}: {name} is {what}: refusing to write through it",
                            "vmharness did not put it there; remove it, or name another folder"
                            + ("; --force replaces it (never writes through it)" if can_force else ""))

    def _check(self, dfd: int, name: str, replacing: bool) -> bool:
        """Whether `name` exists here; anything at it that the harness would not have written (a link
        of either kind, not a regular file) is refused, or with --force let through to be replaced."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"not a name in a folder: {name!r}")
        try:
            st = os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            return False
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return True
        what = _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else \
            f"a hard link (one of {st.st_nlink} names of one file)"
        can_force = replacing and not stat.S_ISDIR(st.st_mode)
        if can_force and self.force:
            return True
        raise self._refuse(name, what, can_force)

    def check(self, name: str, replacing: bool = False) -> bool:
        """Whether `name` exists, refusing a link or special file there, said before any work: one to
        append to (a run checked before resuming), or to be `replacing` (--force lets that through)."""
        with self._opened() as dfd:
            return self._check(dfd, name, replacing)

    def write(self, name: str, data: bytes) -> Path:
        """Replace (or create) `name` with `data`: a new file written, fsynced and renamed over it."""
        with self._opened() as dfd:
            self._check(dfd, name, replacing=True)
            tmp = f".{name}.{os.getpid()}.tmp"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)  # one this process left: never a file of anyone else's name
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            os.fsync(dfd)
        return self.path / name

    def remove(self, name: str) -> bool:
        """Remove `name`, a file of this folder's (a link there only with --force, and then the link
        itself, never what it names); returns whether there was one."""
        with self._opened() as dfd:
            if not self._check(dfd, name, replacing=True):
                return False
            os.unlink(name, dir_fd=dfd)
            os.fsync(dfd)
        return True

    def prune(self, names: Iterable[str], kept: Iterable[Path]) -> None:
        """Remove each of `names` that is not among `kept` (the files this write made): what an earlier
        write left that this one has not."""
        now = {p.name for p in kept}
        for name in names:
            if name not in now:
                self.remove(name)

    @contextlib.contextmanager
    def append(self, name: str, read: bool = False) -> Iterator[int]:
        """A descriptor that appends to `name` (made if absent), a regular file with one name; `read`
        opens it for reading too."""
        with self._opened() as dfd:
            self._check(dfd, name, replacing=False)
            mode = (os.O_RDWR if read else os.O_WRONLY) | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
            try:
                fd = os.open(name, mode | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO):  # put there since the check: a symlink, a FIFO
                    raise self._refuse(name, "a symlink" if exc.errno == errno.ELOOP else "a FIFO", False) from exc
                raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise self._refuse(name, _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else "a hard link", False)
            os.set_blocking(fd, True)
            yield fd
        finally:
            os.close(fd)

    def mark(self, owner: str) -> None:
        """Write the marker naming `owner`, unless it is there already (a verified folder from before
        markers existed)."""
        with self._opened() as dfd:
            if _marked(dfd) == owner:
                return
        self.write(MARKER, _text(owner))

    def folder(self, name: str, missing: str | None = None) -> Folder:
        """A folder inside this one: one that is there, not a link, or else made here (with `missing`,
        the hint of the error that it is not there, it must be there)."""
        with self._opened() as dfd:
            try:
                st = os.lstat(name, dir_fd=dfd)
            except FileNotFoundError:
                if missing is not None:
                    raise HarnessError(f"{self.flag}: it has no {name}/ folder", missing) from None
                os.mkdir(name, 0o755, dir_fd=dfd)
                os.fsync(dfd)
            else:
                if not stat.S_ISDIR(st.st_mode):
                    raise self._refuse(name, _kind(st.st_mode), False)
        return Folder(self.path / name, f"{self.flag}/{name}", self.force)


Legacy = Callable[[Path, list[str]], bool]  # a folder (and its entries) written before markers existed


def _refusal(flag: str, message: str, force: bool, hint: str) -> HarnessError:
    return HarnessError(f"{flag} {message}", hint + ("; --force writes there anyway (never through a link)"
                                                      if force else ""))


def _judge(path: Path, owner: str, flag: str, force: bool, legacy: Legacy | None, hint: str) -> str:
    """What `path` is to `owner`: "absent", "ours", "mark" (empty, or legacy: ours once marked) or
    "forced"; anything else is refused."""
    if not str(path):
        raise HarnessError(f"{flag} is empty", hint)
    real = os.path.realpath(path)
    for kernel_fs in _KERNEL_FS:
        if real == kernel_fs or real.startswith(kernel_fs + "/"):
            raise HarnessError(f"{flag} {path} is under {kernel_fs}, the kernel's: refusing to write there", hint)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        raise HarnessError(f"{flag} {path}: {exc.strerror}", hint) from exc
    if stat.S_ISLNK(st.st_mode):
        raise HarnessError(f"{flag} {path} is a symlink: refusing to write through it", "name the folder itself")
    if not stat.S_ISDIR(st.st_mode):
        raise HarnessError(f"{flag} {path} exists and is not a folder", hint)
    try:
        dfd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        raise HarnessError(f"{flag} {path}: cannot open it: {exc.strerror}", hint) from exc
    try:
        said = _marked(dfd)
        entries = sorted(os.listdir(dfd))
    finally:
        os.close(dfd)
    if said == owner:
        return "ours"
    if said is not None:
        if force:
            return "forced"
        raise _refusal(flag, f"{path} was written by vmharness {said}, not by vmharness {owner}", True, hint)
    if not entries:
        return "mark"
    if legacy is not None and legacy(path, entries):
        return "mark"
    if force:
        return "forced"
    shown = ", ".join(entries[:_SHOWN]) + (f" and {len(entries) - _SHOWN} more" if len(entries) > _SHOWN else "")
    raise _refusal(flag, f"{path} is a folder vmharness did not make (it holds {shown})", True, hint)


def preflight(path: Path, owner: str, flag: str, force: bool = False, legacy: Legacy | None = None,
              hint: str = "name a new or empty folder") -> None:
    """The checks of `claim`, writing nothing: said before any work."""
    _judge(path, owner, flag, force, legacy, hint)


def claim(path: Path, owner: str, flag: str, force: bool = False, legacy: Legacy | None = None,
          hint: str = "name a new or empty folder") -> Folder:
    """The folder at `path` as `owner`'s: made and marked if absent, marked if empty (or `legacy`),
    verified by its marker if not; another's is refused unless `force`."""
    state = _judge(path, owner, flag, force, legacy, hint)
    try:
        if state == "absent":
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # made meanwhile: judged again below
                os.mkdir(path, 0o755)
            state = _judge(path, owner, flag, force, legacy, hint)
        folder = Folder(path, flag, force)
        if state == "mark":
            folder.mark(owner)
    except OSError as exc:
        raise HarnessError(f"{flag} {path}: cannot write there: {exc.strerror}", hint) from exc
    return folder


def verify(path: Path, owner: str, flag: str, legacy: Legacy | None = None,
           hint: str = "name a folder vmharness wrote") -> Folder:
    """An existing folder that is `owner`'s (its marker, or `legacy`): nothing else. Nothing is
    written; the caller marks it (`Folder.mark`) once the rest of its checks pass."""
    if not os.path.lexists(path):
        raise HarnessError(f"{flag} {path} does not exist", hint)
    _judge(path, owner, flag, False, legacy, hint)
    return Folder(path, flag)
