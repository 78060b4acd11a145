"""Reading a file a user named, or one inside a folder the harness did not make (a configuration, an
nginx configuration, a run directory's manifest and records, an image's metadata, a kernel): a
regular file only, at most a cap that the error names, and never blocking. A path of `/dev/zero`
would otherwise be read until memory runs out, a FIFO would block the reader forever, and a sparse
file of gigabytes would cost minutes before anything is said.

`read_file` is the one reader of every file the harness did not write, a host file through HostRoot
(system/root.py) as much as a user's; `read`/`text` turn what it raises into one line naming the file
and what is wrong with it. A file inside a folder someone else filled (a run folder's manifest,
records and profiles) is read with `within` (`read_inside`): reached from the folder one name at a
time, never through a link of either kind.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from vmharness.errors import HarnessError

MAX_READ = 1 << 20  # bytes; larger host files are refused (pass `limit` for the few known to be big)


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, in words (for errors)."""
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def not_regular(shown: str, mode: int, hint: str | None = None) -> HarnessError:
    return HarnessError(
        f"{shown} is {kind_of(mode)}, not a regular file: refusing to read it",
        hint or "only regular files are read (host-snapshot stores the kernel's files as such)",
    )


def read_file(path: Path, shown: str, limit: int = MAX_READ, hint: str | None = None) -> bytes:
    """The bytes of a regular file, at most `limit` of them; `shown` names it in errors (`hint`, if
    given, is their hint). Never blocks: the type is checked before opening (opening a device can act
    on it), opened non-blocking and checked again on the open file; a file whose size is over `limit`
    is refused before a byte is read. OSError for a file that is missing or cannot be read."""
    if not stat.S_ISREG(mode := os.stat(path).st_mode):
        raise not_regular(shown, mode, hint)
    return _read_open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC), shown, limit, hint)


def _read_open(fd: int, shown: str, limit: int, hint: str | None, single: bool = False) -> bytes:
    """The bytes of the file open at `fd` (closed here): a regular one (with one name, if `single`) of at
    most `limit` bytes."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(shown, st.st_mode, hint)
        if single and st.st_nlink != 1:
            raise HarnessError(f"{shown} is a hard link (one of {st.st_nlink} names of one file): refusing to read "
                               "it", hint or "copy the file into the folder (cp, not a link)")
        too_big = HarnessError(f"{shown} is larger than {limit} bytes: refusing to read it",
                               hint or "kernel attributes and configuration files are small; this is something else")
        if st.st_size > limit:
            raise too_big
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(65536, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise too_big
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_inside(folder: Path, rel: str, limit: int, hint: str | None = None) -> bytes:
    """The bytes of `rel` (names joined by "/") inside `folder`, a folder someone else may have filled (a run
    folder): each name is opened relative to the one before without following a link, so neither the file
    nor a folder on the way may be a symlink (to /etc/shadow, or out of the folder); it must be a regular
    file with one name (a hard link to a file elsewhere cannot be told from the file itself), of at most
    `limit` bytes. Errors name the path; OSError for one that is missing or cannot be read."""
    *parts, name = rel.split("/")
    if any(p in ("", ".", "..") for p in (*parts, name)):
        raise ValueError(f"not a path inside a folder: {rel!r}")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    where = folder
    for part in parts:  # each step closes the folder it opened the next name in
        where = where / part
        fd = _step(fd, part, where, os.O_RDONLY | os.O_DIRECTORY, hint)
    fd = _step(fd, name, folder / rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, hint)
    return _read_open(fd, str(folder / rel), limit, hint, single=True)


def _step(dfd: int, name: str, shown: Path, flags: int, hint: str | None) -> int:
    """`name` opened inside the open folder `dfd` (closed here), never through a link; a FIFO or a device is
    refused before it is opened (opening one can block, or act on the device)."""
    try:
        mode = os.lstat(name, dir_fd=dfd).st_mode
        if stat.S_ISLNK(mode):
            raise HarnessError(f"{shown} is a symlink: refusing to read through it",
                               hint or "copy the file into the folder (cp, not a link)")
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise not_regular(str(shown), mode, hint)
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    finally:
        os.close(dfd)


Fault = Callable[[str], HarnessError]  # "is missing" -> the error naming the file


def _fault(shown: str, hint: str) -> Fault:
    return lambda what: HarnessError(f"{shown} {what}", hint)


def read(path: Path, limit: int, hint: str = "check the path", fault: Fault | None = None,
         key: str | None = None, within: Path | None = None) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them; errors name it (after `key`,
    the setting or flag that named it, if given); `fault` makes the error for a file that is missing
    or cannot be read (default: one naming the file, with `hint`). With `within`, a folder `path` lies
    in, it is read as `read_inside` reads (no link on the way from there, one name)."""
    shown = f"{key} {path}" if key else str(path)
    said = fault or _fault(shown, hint)
    try:
        if within is not None:
            return read_inside(within, path.relative_to(within).as_posix(), limit, hint)
        return read_file(path, shown, limit, hint)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise said("is missing") from exc
    except PermissionError as exc:
        raise said("cannot be read: no permission") from exc
    except OSError as exc:
        raise said(f"cannot be read: {exc.strerror}") from exc


def text(path: Path, limit: int, hint: str = "check the path", fault: Fault | None = None,
         key: str | None = None, within: Path | None = None) -> str:
    """`read`, as UTF-8 text; text that is not is named by its line."""
    data = read(path, limit, hint, fault, key, within)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise (fault or _fault(f"{key} {path}" if key else str(path), hint))(f"line {line} is not UTF-8 text") from exc
