"""Reading a TOML file the harness is given (recipe, bench configuration, tuning profile): a missing
file is the caller's error, bad syntax is one line naming the file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError


def read(path: Path, missing: HarnessError) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise missing from exc
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path}: {exc}", "fix the TOML syntax") from exc
