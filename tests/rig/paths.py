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


def machine_cache(name: str) -> Path:
    """`<cache>/NAME/`, where `<cache>` is `$VMHARNESS_CACHE`, or else one per machine outside every
    clone (`$XDG_CACHE_HOME/vmharness`, `~/.cache/vmharness`, beside the tools `make` builds)."""
    base = os.environ.get("VMHARNESS_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vmharness")
    path = Path(base).resolve() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """`<cache>/rig/`: what it holds is named by its content (the kernel package's ABI name, the
    initramfs's sha256), so clones of different versions share it safely, and a clean clone no longer
    downloads and unpacks the kernel."""
    return machine_cache("rig")


@contextmanager
def cache_lock(timeout: float = 900.0, root: Path | None = None) -> Iterator[Path]:
    """Hold an exclusive lock on a cache (the rig's unless `root`) while filling it (parallel test runs
    share it)."""
    root = root or cache_dir()
    deadline = time.monotonic() + timeout
    with open(root / ".lock", "w") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HarnessError(
                        f"the cache {root} stayed locked for {timeout:g} s",
                        "another test run is filling it; wait for it or remove the .lock holder",
                    ) from None
                time.sleep(0.2)
        try:
            yield root
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
