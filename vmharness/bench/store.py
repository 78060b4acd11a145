"""The run directory, the one results format: `manifest.json` (what was asked and on what, start and
end) and `records.jsonl`, one measurement per line, appended and fsynced as each is measured, so a
crash loses at most the point in flight. Sampler streams are kept raw in `samples/`.

A run directory is read back long after it was written, perhaps copied, perhaps damaged: a manifest
that is not a JSON object, or a record line in the middle that is not one, is an error naming the file
(and line); a torn last line is what a crash mid-write leaves, so it is reported once and the rest is
used. Only regular files are read (a FIFO would block the reader forever). A whole record whose values
cannot be a measurement, of an unknown kind, or repeating a point (bench/record_check.py) is left out of
every figure and said once; with `strict` (report --strict) it is an error naming its line.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness.bench import record_check
from vmharness.errors import HarnessError

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
POINTS = ("measurement", "load")  # the kinds of record that are a measured point, with a key
MAX_MANIFEST = 64 << 20  # bytes: the configuration and the provenance of each boot

log = logging.getLogger("vmharness.store")


def _damaged(path: Path, fault: str) -> HarnessError:
    return HarnessError(f"{path} {fault}", "the run directory is damaged: restore the file from a copy, "
                                           "or fix the line by hand")


def _read(path: Path, limit: int | None = None) -> str:
    """A run file's text: a regular file, UTF-8, at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise _damaged(path, "is missing") from exc
    except OSError as exc:
        raise _damaged(path, f"cannot be read: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _damaged(path, "is not a regular file")
        if limit is not None and os.fstat(fd).st_size > limit:
            raise _damaged(path, f"is larger than {limit} bytes")
        data = f.read()
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _damaged(path, f"line {line} is not UTF-8 text") from exc


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


def check_new(path: Path, flag: str = "the run directory") -> None:
    """A place a new run directory can be made: absent, or an empty folder (said before any work)."""
    if not str(path):
        raise HarnessError(f"{flag} is empty", "name a new folder, e.g. --out runs/study")
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise HarnessError(f"{flag} {path} exists and is not a folder", "name a new run directory")
    if path.is_dir() and any(path.iterdir()):
        raise HarnessError(f"{flag} {path} exists and is not empty", "name a new run directory, or --resume it")


@dataclass
class RunDir:
    path: Path
    strict: bool = False  # a record left out of every figure is an error instead (report --strict)
    _reported: set[int] = field(default_factory=set, repr=False, compare=False)  # torn lines warned of
    # the records the last read left out of every figure: (line, why, what), said once on stderr
    left_out: list[tuple[int, str, str]] = field(default_factory=list, repr=False, compare=False)
    _said: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def create(cls, path: Path, manifest: dict[str, Any]) -> RunDir:
        check_new(path)
        try:
            (path / "samples").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _full(exc, path) from exc
        run = cls(path)
        write_json(path / MANIFEST, {**manifest, "started": _now(), "ended": None})
        return run

    @classmethod
    def open(cls, path: Path, strict: bool = False) -> RunDir:
        """A run directory to read (or resume); its manifest is checked here, once."""
        hint = "pass the directory a run wrote (bench --out, run --out)"
        if not path.exists():
            raise HarnessError(f"no run directory {path}: it does not exist", hint)
        if not path.is_dir():
            raise HarnessError(f"{path} is a file, not a run directory", hint)
        if not os.path.lexists(path / MANIFEST):
            raise HarnessError(f"{path} is not a run directory (no {MANIFEST})", hint)
        run = cls(path, strict)
        _ = run.manifest  # read for its checks
        return run

    @property
    def manifest(self) -> dict[str, Any]:
        path = self.path / MANIFEST
        try:
            data = json.loads(_read(path, MAX_MANIFEST))
        except (ValueError, RecursionError) as exc:
            raise _damaged(path, f"is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _damaged(path, f"is not a JSON object (a {type(data).__name__})")
        config = data.get("config", {})
        instances = config.get("instance", []) if isinstance(config, dict) else None
        if not isinstance(instances, list) or not all(
                isinstance(i, dict) and isinstance(i.get("name"), str) for i in instances):
            raise _damaged(path, "has a config that is not an object with a list of named instances")
        return data

    def update_manifest(self, **fields: Any) -> None:
        write_json(self.path / MANIFEST, {**self.manifest, **fields})

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": _now(), **record}, sort_keys=True) + "\n"
        try:
            fd = os.open(self.path / RECORDS, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                _cut_torn_tail(fd, self.path / RECORDS)
                os.write(fd, line.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _full(exc, self.path) from exc

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record that counts; a torn last line (a crash mid-write) is reported and
        skipped, a record that cannot count (record_check) is left out and said once (`left_out`), any
        other damage is an error naming the line, raised before the first record is handed out."""
        path = self.path / RECORDS
        if not os.path.lexists(path):
            return iter(())
        lines = _read(path).splitlines()
        out = []
        seen = record_check.Seen()
        left: list[tuple[int, str, str]] = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec, odd = record_check.loads(line)
            except (ValueError, RecursionError) as exc:
                if n == len(lines):
                    if n not in self._reported:
                        self._reported.add(n)
                        log.warning("warning: %s line %d is cut short (a crash mid-write?): left out, "
                                    "the %d lines before it are used", path, n, n - 1)
                    break
                raise _damaged(path, f"line {n} is not JSON: {exc}") from exc
            if not isinstance(rec, dict):
                raise _damaged(path, f"line {n} is not a record (a JSON {type(rec).__name__})")
            if (fault := _fault(rec)) is not None:
                raise _damaged(path, f"line {n} is a {rec.get('kind')} record {fault}")
            if (bad := record_check.fault(rec, seen, odd)) is not None:
                if self.strict:
                    raise HarnessError(f"{path} line {n}: {record_check.describe(rec, bad)}",
                                       "without --strict the report leaves such a record out of every figure, "
                                       "and its first warning says so")
                left.append((n, bad.why, record_check.describe(rec, bad)))
                continue
            out.append(rec)
        self.left_out = left
        if left and not self._said:
            self._said = True
            print(f"warning: {record_check.summary([(path, *x) for x in left])}", file=sys.stderr, flush=True)
        return iter(out)

    def completed(self) -> set[str]:
        """Keys of the points measured successfully: what --resume does not measure again (a record left
        out of every figure is not among them: its point is measured again)."""
        return {r["key"] for r in self.records() if r.get("kind") in POINTS and r.get("ok")}


def left_out_line(runs: list[RunDir]) -> list[str]:
    """The report's first warning, when a run's records were left out of every figure: how many, why, and
    the first few by file:line (empty when none was)."""
    left = [(r.path / RECORDS, *x) for r in runs for x in r.left_out]
    return [record_check.summary(left)] if left else []


def _fault(rec: dict[str, Any]) -> str | None:
    """What a record lacks of what this module relies on (a measurement's key: see `completed`)."""
    if rec.get("kind") in POINTS and not isinstance(rec.get("key"), str):
        return "without a key"
    return None


def _cut_torn_tail(fd: int, path: Path) -> None:
    """Drop a torn last line (no newline: a crash cut its write) before appending after it, where it
    would sit mid-file and make the whole file damaged."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = max(0, size - (1 << 20))
    last = os.pread(fd, size - start, start).rfind(b"\n")
    if last < 0 and start > 0:
        raise _damaged(path, "ends in a line over 1 MiB long")
    keep = start + last + 1
    log.warning("warning: %s ends in a torn line (a crash mid-write?): dropping its %d bytes", path, size - keep)
    os.ftruncate(fd, keep)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
