"""The run directory, the one results format: `manifest.json` (what was asked and on what, start and
end) and `records.jsonl`, one measurement per line, appended and fsynced as each is measured, so a
crash loses at most the point in flight. Sampler streams are kept raw in `samples/`.

A run directory is read back long after it was written, perhaps copied, perhaps damaged: a manifest
that is not a JSON object, or a record line in the middle that is not one, is an error naming the file
(and line); a torn last line is what a crash mid-write leaves, so it is reported once and the rest is
used. Only regular files are read (a FIFO would block the reader forever), each at most a size the
error names. A whole record whose values cannot be a measurement, of an unknown kind, repeating a
point (rundir/record_check.py) or contradicting the run (rundir/cross_check.py) is left out of every
figure and said once (`report --strict`: an error naming its line, as a key given twice or a value of the
wrong type always is). The records are read once and kept (`RunDir.records`).

The folder is the harness's (vmharness/system/owned.py): made and marked by `create`, or checked by `resume`
(its manifest's kind, no link where it writes, its samples/ folder there) before anything is written;
the manifest is replaced by a rename, records are appended only to a regular file with one name.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness import userfile
from vmharness.errors import HarnessError
from vmharness.rundir import cross_check, jsontext, manifest_values, record_check
from vmharness.rundir.identity import Identity, identity_of
from vmharness.system import owned

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
REPORT = "report"  # the folder `run` writes its report into
POINTS = ("measurement", "load", "syscalls", "profile")  # the kinds of record that are a measured point, with a key
MAX_MANIFEST = 64 << 20  # bytes: the configuration and the provenance of each boot
MAX_RECORDS = 1 << 30  # bytes: 10,000 points of 100 KiB (a histogram per microsecond); a larger file is
# refused before it is read

log = logging.getLogger("vmharness.store")


def _damaged(path: Path, fault: str) -> HarnessError:
    return HarnessError(f"{path} {fault}", "the run directory is damaged: restore the file from a copy, "
                                           "or fix the line by hand")


def _read(path: Path, limit: int) -> str:
    """A run file's text: a regular file with one name in the folder itself (no link of either kind:
    userfile.read_inside), UTF-8, at most `limit` bytes (the error names the cap)."""
    return userfile.text(path, limit, f"a run directory's {path.name} is a regular file of its own, far smaller: "
                         "this one is damaged or not a run's", lambda fault: _damaged(path, fault), within=path.parent)


def _full(exc: OSError, where: Path) -> HarnessError:
    if exc.errno == errno.ENOSPC:
        return HarnessError(f"the disk holding {where} is full", f"free space; what was measured is in {where}, "
                            f"and --resume {where} continues")
    return HarnessError(f"cannot write {where}: {exc.strerror}", "check the path and its permissions")


def _json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def check_new(path: Path, flag: str = "the run directory") -> None:
    """A place a new run directory can be made: absent, or an empty folder (said before any work)."""
    if not str(path):
        raise HarnessError(f"{flag} is empty", "name a new folder, e.g. --out runs/study")
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise HarnessError(f"{flag} {path} exists and is not a folder", "name a new run directory")
    if path.is_dir() and any(path.iterdir()):
        raise HarnessError(f"{flag} {path} exists and is not empty", "name a new run directory, or --resume it")
    owned.preflight(path, "bench", flag)  # not under /proc, /sys or /dev


def _legacy(path: Path, entries: list[str]) -> bool:
    """A run directory written before folders were marked: its manifest is there (checked by `open`)."""
    return MANIFEST in entries


@dataclass
class RunDir:
    path: Path
    strict: bool = False  # a record left out of every figure is an error instead (report --strict)
    _reported: set[int] = field(default_factory=set, repr=False, compare=False)  # torn lines warned of
    # the records the last read left out of every figure: (line, why, what), said once on stderr
    left_out: list[tuple[int, str, str]] = field(default_factory=list, repr=False, compare=False)
    missing: list[str] = field(default_factory=list, repr=False, compare=False)  # what the records lack: said once
    _said: bool = field(default=False, repr=False, compare=False)
    _kept: tuple[Identity, list[dict[str, Any]]] | None = field(default=None, repr=False, compare=False)  # records
    _manifest: tuple[Identity, dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(cls, path: Path, manifest: dict[str, Any]) -> RunDir:
        check_new(path)
        folder = owned.claim(path, _owner(manifest), "the run directory")
        try:
            folder.folder("samples")
            folder.write(MANIFEST, _json({**manifest, "started": _now(), "ended": None}))
        except OSError as exc:
            raise _full(exc, path) from exc
        return cls(path)

    @classmethod
    def resume(cls, path: Path, kind: str) -> RunDir:
        """A run directory `vmharness KIND` wrote, to go on with: every file it will write to checked
        (its own folder, no link, its samples/ there) before anything is appended."""
        run = cls.open(path)
        said = run.manifest.get("kind")
        if said != kind:
            other = said if said in ("bench", "run") else None
            raise HarnessError(f"--resume {path}: it was written by " + (f"`vmharness {other}`" if other else
                               f"no vmharness command (kind {str(said)[:40]!r})") + f", not `vmharness {kind}`",
                               f"vmharness {other} --resume {path}" if other else "start a new run")
        flag = f"--resume {path}"
        folder = owned.verify(path, kind, flag, _legacy, "resume a run directory bench or run wrote, or start a "
                              "new one")
        for name in (MANIFEST, RECORDS):
            folder.check(name)
        for sub in ("samples", "domains", "profiles"):  # samples/ is made with the run; the others later
            if sub == "samples" or os.path.lexists(path / sub):
                inner = folder.folder(sub, missing="it is not a whole run directory: start a new run")
                for name in sorted(os.listdir(inner.path)):
                    inner.check(name)
        try:
            folder.mark(kind)  # a run directory from before markers: the harness's from now on
        except OSError as exc:
            raise _full(exc, path) from exc
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
        """The manifest, checked (manifest_values) and kept while the file is the one read, as the records
        are (a report asks a dozen times; a manifest of 64 MiB takes a second to parse): never change it."""
        path = self.path / MANIFEST
        identity = identity_of(path)
        if self._manifest is not None and identity is not None and self._manifest[0] == identity:
            return self._manifest[1]
        try:
            data = jsontext.value(_read(path, MAX_MANIFEST))
        except (ValueError, RecursionError) as exc:
            raise _damaged(path, f"is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _damaged(path, f"is not a JSON object (a {type(data).__name__})")
        config = data.get("config", {})
        instances = config.get("instance", []) if isinstance(config, dict) else None
        if not isinstance(instances, list) or not all(
                isinstance(i, dict) and isinstance(i.get("name"), str) for i in instances):
            raise _damaged(path, "has a config that is not an object with a list of named instances")
        if (fault := manifest_values.fault(data)) is not None:
            raise _damaged(path, fault)
        self._manifest = (identity, data) if identity is not None else None
        return data

    @property
    def folder(self) -> owned.Folder:
        """Where the run's files are written (made or verified as the harness's by create or resume)."""
        return owned.Folder(self.path, str(self.path))

    def update_manifest(self, **fields: Any) -> None:
        data = _json({**self.manifest, **fields})
        try:
            self.folder.write(MANIFEST, data)
        except OSError as exc:
            raise _full(exc, self.path) from exc

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": _now(), **record}, sort_keys=True) + "\n"
        try:
            with self.folder.append(RECORDS, read=True) as fd:
                _cut_torn_tail(fd, self.path / RECORDS)
                os.write(fd, line.encode())
                os.fsync(fd)
        except OSError as exc:
            raise _full(exc, self.path) from exc
        finally:
            self._kept = None  # read again: a torn tail cut and a line of its length would keep the size

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record that counts; a torn last line (a crash mid-write) is reported and
        skipped, a record that cannot count (record_check) is left out and said once (`left_out`), any
        other damage is an error naming the line, raised before the first record is handed out.

        Read and checked once, then kept (a report asks often; 100 KiB records take seconds to parse) until
        an `append` through this RunDir or until the file is not the one read (`identity_of`: another hand
        wrote it); the kept dicts are handed out: never change them. A file that fails is never kept."""
        path = self.path / RECORDS
        if not os.path.lexists(path):
            self._kept = None
            return iter(())
        identity = identity_of(path)
        if self._kept is not None and identity is not None and self._kept[0] == identity:
            return iter(self._kept[1])
        lines = _read(path, MAX_RECORDS).splitlines()
        out: list[tuple[int, dict[str, Any]]] = []
        seen = record_check.Seen()
        left: list[tuple[int, dict[str, Any], record_check.Fault]] = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec, odd = jsontext.line(line)
            except (ValueError, RecursionError) as exc:
                if n == len(lines) and not isinstance(exc, jsontext.Twice):
                    if n not in self._reported:
                        self._reported.add(n)
                        log.warning("warning: %s line %d is cut short (a crash mid-write?): left out, "
                                    "the %d lines before it are used", path, n, n - 1)
                    break
                raise _damaged(path, f"line {n} is not JSON: {exc}") from exc
            if not isinstance(rec, dict):
                raise _damaged(path, f"line {n} is not a record (a JSON {type(rec).__name__})")
            if (fault := _fault(rec) or record_check.type_fault(rec)) is not None:
                raise _damaged(path, f"line {n} is a {rec.get('kind')} record {fault}")
            if (bad := record_check.fault(rec, seen, odd)) is not None:
                left.append((n, rec, bad))
                continue
            out.append((n, rec))
        recs, self.left_out, self.missing = cross_check.settle(self.manifest, out, left, path, self.strict)
        if (self.left_out or self.missing) and not self._said:
            self._said = True
            for said in left_out_line([self]):
                print(f"warning: {said}", file=sys.stderr, flush=True)
        self._kept = (identity, recs) if identity is not None else None
        return iter(recs)

    def completed(self) -> set[str]:
        """Keys of the points measured successfully: what --resume does not measure again (a record left
        out of every figure is not among them: its point is measured again)."""
        return {r["key"] for r in self.records() if r.get("kind") in POINTS and r.get("ok")}


def left_out_line(runs: list[RunDir]) -> list[str]:
    """The report's first warnings: the records left out of every figure (how many, why, the first few by
    file:line), then what a run's records lack (cross_check.missing); empty when neither."""
    left = [(r.path / RECORDS, *x) for r in runs for x in r.left_out]
    return ([record_check.summary(left)] if left else []) + [f"{r.path / RECORDS}: {m}" for r in runs
                                                             for m in r.missing]


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


def _owner(manifest: dict[str, Any]) -> str:
    """The owner a run directory's marker names: the command that wrote it, `bench` or `run`."""
    return str(manifest.get("kind", "bench"))


TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # each record's "time", UTC to the second


def _now() -> str:
    return time.strftime(TIME_FORMAT, time.gmtime())
