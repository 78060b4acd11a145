"""Reading a TOML file the harness is given (recipe, bench configuration, tuning profile): a missing
file is the caller's error; anything else wrong with it (a folder, a FIFO, not UTF-8, bad syntax,
too big) is one line naming the file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.userfile import read_file

MAX_SIZE = 1 << 20  # bytes: a configuration, never data


def read(path: Path, missing: HarnessError) -> dict[str, Any]:
    try:
        data = read_file(path, str(path), MAX_SIZE)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise missing from exc
    except PermissionError as exc:
        raise HarnessError(f"no permission to read {path}", "check its permissions") from exc
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc.strerror}", "check the path") from exc
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HarnessError(f"{path}: line {line} is not UTF-8 text", "save the file as UTF-8") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path}: {exc}", "fix the TOML syntax") from exc
    except RecursionError as exc:
        raise HarnessError(f"{path}: arrays or tables nested too deeply to read", "fix the TOML syntax") from exc
