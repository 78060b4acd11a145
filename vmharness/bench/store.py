"""The run directory, the one results format: `manifest.json` (what was asked and on what, start and
end) and `records.jsonl`, one measurement per line, appended and fsynced as each is measured, so a
crash loses at most the point in flight. Sampler streams are kept raw in `samples/`."""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _full(exc: OSError, where: Path) -> HarnessError:
    if exc.errno == errno.ENOSPC:
        return HarnessError(f"the disk holding {where} is full", f"free space; what was measured is in {where}, "
                            f"and --resume {where} continues")
    return HarnessError(f"cannot write {where}: {exc.strerror}", "check the path and its permissions")


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace a JSON file atomically (write, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        _fsync_dir(path.parent)
    except OSError as exc:
        raise _full(exc, path.parent) from exc


@dataclass
class RunDir:
    path: Path

    @classmethod
    def create(cls, path: Path, manifest: dict[str, Any]) -> RunDir:
        if path.exists() and any(path.iterdir()):
            raise HarnessError(f"{path} exists and is not empty", "name a new run directory, or --resume it")
        try:
            (path / "samples").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _full(exc, path) from exc
        run = cls(path)
        write_json(path / MANIFEST, {**manifest, "started": _now(), "ended": None})
        return run

    @classmethod
    def open(cls, path: Path) -> RunDir:
        if not (path / MANIFEST).is_file():
            raise HarnessError(f"{path} is not a run directory (no {MANIFEST})", "pass the directory a run wrote")
        return cls(path)

    @property
    def manifest(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / MANIFEST).read_text())
        return data

    def update_manifest(self, **fields: Any) -> None:
        write_json(self.path / MANIFEST, {**self.manifest, **fields})

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": _now(), **record}, sort_keys=True) + "\n"
        try:
            fd = os.open(self.path / RECORDS, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _full(exc, self.path) from exc

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record; a torn last line (a crash mid-write) is skipped."""
        path = self.path / RECORDS
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                continue

    def completed(self) -> set[str]:
        """Keys of the points measured successfully: what --resume does not measure again."""
        return {r["key"] for r in self.records() if r.get("kind") == "measurement" and r.get("ok")}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
