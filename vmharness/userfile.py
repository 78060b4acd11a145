"""Reading a file a user named, or one inside a folder the harness did not make (a configuration, an
nginx configuration, a run directory's manifest and records, an image's metadata, a kernel): a
regular file only, at most a cap that the error names, and never blocking. A path of `/dev/zero`
would otherwise be read until memory runs out, a FIFO would block the reader forever, and a sparse
file of gigabytes would cost minutes before anything is said.

The bytes come from the one reader, `host.root.read_file` (which reads every host file too); this
module turns what it raises into one line naming the file and what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.system.root import read_file

Fault = Callable[[str], HarnessError]  # "is missing" -> the error naming the file


def _fault(shown: str, hint: str) -> Fault:
    return lambda what: HarnessError(f"{shown} {what}", hint)


def read(path: Path, limit: int, hint: str = "check the path", fault: Fault | None = None,
         key: str | None = None) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them; errors name it (after `key`,
    the setting or flag that named it, if given); `fault` makes the error for a file that is missing
    or cannot be read (default: one naming the file, with `hint`)."""
    shown = f"{key} {path}" if key else str(path)
    said = fault or _fault(shown, hint)
    try:
        return read_file(path, shown, limit, hint)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise said("is missing") from exc
    except PermissionError as exc:
        raise said("cannot be read: no permission") from exc
    except OSError as exc:
        raise said(f"cannot be read: {exc.strerror}") from exc


def text(path: Path, limit: int, hint: str = "check the path", fault: Fault | None = None,
         key: str | None = None) -> str:
    """`read`, as UTF-8 text; text that is not is named by its line."""
    data = read(path, limit, hint, fault, key)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise (fault or _fault(f"{key} {path}" if key else str(path), hint))(f"line {line} is not UTF-8 text") from exc
