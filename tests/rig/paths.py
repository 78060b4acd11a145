"""Where the rig keeps things: the repository root and the download/build cache."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vmharness.errors import HarnessError

REPO = Path(__file__).resolve().parents[2]
"""The repository root. L1 sees L0's `/`, so this path is valid inside L1 too."""


def cache_dir() -> Path:
    """`<cache>/rig/`, where `<cache>` is `$VMHARNESS_CACHE` or `<repo>/.cache`."""
    base = os.environ.get("VMHARNESS_CACHE") or str(REPO / ".cache")
    path = Path(base).resolve() / "rig"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def cache_lock(timeout: float = 900.0) -> Iterator[Path]:
    """Hold an exclusive lock on the cache while filling it (parallel test runs share it)."""
    root = cache_dir()
    deadline = time.monotonic() + timeout
    with open(root / ".lock", "w") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"the rig cache {root} stayed locked for {timeout:g} s",
                        "another test run is filling it; wait for it or remove the .lock holder",
                    ) from None
                time.sleep(0.2)
        try:
            yield root
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
