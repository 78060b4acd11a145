"""The journal of host changes: each change is recorded, fsynced, *before* it is made, with what was
there and who made it (its owner); `host-restore` undoes the records newest first. Undo steps are
idempotent (they set the recorded state, whatever the state is now), so a record whose change never
happened — the process was killed between the two — undoes to a no-op.

Every kind of record (its `op`, named in journal/kinds.py) is a row of one table, `OPS`: how to
describe it and how to undo it. Each subsystem registers the ops it writes when it is imported (the
host's in host/prepare/, harness-made files' in journal/files.py, tuning's in tune/apply.py, guests' in
guest/vm.py, servers' in bench/server.py), so the host layer never reaches up into the others, and `record` refuses an
op that no one registered: a record that nothing could undo is never written. A record of an op
unknown to the reading process (a newer harness wrote it) is never dropped: `unknown` reports it
and the journal stays.

Owners: a record names who took the resource — `run:ID` for a run or bench (given back when it
ends), `host-prepare`, `vm:NAME` or `tune` for what a command leaves in place on purpose until its
counterpart (host-restore, vm down, tune revert) gives it back. Holding `Lock` proves that no other
harness is alive, so a `run:` record found then is the leftover of a dead process (`transient`).
`hand_over` re-tags records (a run's host preparation kept with --keep-host becomes host-prepare's).

The journal holds what is outstanding: each release that leaves something outstanding rewrites it
with those records alone (their owners as handed over, their sequence numbers kept, and a marker
holding the highest number given), so a long study on a host kept prepared does not grow it with
every run; the rewrite happens under `Lock`, so no other process appends meanwhile. Its size is
capped where it is written and where it is read by the same figures: a record of at most MAX_LINE
bytes, a journal of at most MAX_JOURNAL; a change that would take it past that is refused before it
is made, so the harness never writes a journal it cannot read back.

Lives in /run/vmharness/ (tmpfs): everything the harness changes on a host (driver bindings, runtime
hugepages, mounts, loaded modules) is also forgotten by the kernel at a reboot, so a journal that
survived one would describe state that no longer exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vmharness.errors import HarnessError
from vmharness.journal import journalfile
from vmharness.journal.journalfile import MAX_LINE
from vmharness.journal.kinds import OpKind
from vmharness.system.root import HostRoot

STATE_DIR = "/run/vmharness"
JOURNAL = f"{STATE_DIR}/journal.jsonl"
LOCK = f"{STATE_DIR}/lock"
RUN_PREFIX = "run:"  # owners that end with their process: a run's or a bench's id
MAX_JOURNAL = 1024 * MAX_LINE  # 64 MiB: a thousand records of the largest size, some 30,000 of an IRQ's on
# a host of 1,024 CPUs (2.1 KiB), outstanding at once; the old cap, 1 MiB, refused 487 of those

Record = dict[str, Any]
Undo = Callable[[HostRoot, Record], list[str]]  # the problems that remain (empty: given back)


@dataclass(frozen=True)
class Op:
    """One kind of journal record: what it says in words, and how it is given back (None: a marker,
    nothing to undo)."""

    describe: Callable[[Record], str]
    undo: Undo | None
    fields: tuple[str, ...] = ()  # keys every record of it holds
    kept: Callable[[Record], str | None] | None = None  # why a record is never undone (kept), if it is
    types: Mapping[str, Callable[[object], bool]] = field(default_factory=dict)  # checks of some of them


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_str(v: object) -> bool:
    return isinstance(v, str)


def str_or_none(v: object) -> bool:
    return v is None or isinstance(v, str)


def ints(v: object) -> bool:
    return isinstance(v, list) and all(is_int(x) for x in v)


def strs(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


OPS: dict[str, Op] = {}


def register(name: OpKind, op: Op) -> None:
    """Add a row to the table (at import of the subsystem that owns the op)."""
    if OPS.get(name, op) is not op:
        raise RuntimeError(f"journal op {name!r} is registered twice")
    OPS[name] = op


def _marker(text: str) -> Callable[[Record], str]:
    return lambda _rec: text


register(OpKind.BEGIN, Op(_marker("(start of a host-prepare)"), None, ("pid",)))
register(OpKind.RELEASED, Op(_marker("(records given back)"), None, ("seqs",), types={"seqs": ints}))
register(OpKind.OWNER, Op(_marker("(records handed over)"), None, ("seqs", "to"), types={"seqs": ints, "to": is_str}))


def _state_dir(root: HostRoot) -> None:
    root.mkdir(STATE_DIR, mode=0o700)  # refused off the live host


@dataclass
class Lock:
    """One harness process changes the host at a time. Refused off the live host: nothing is written
    into a host-root tree."""

    root: HostRoot
    fd: int = -1

    def __enter__(self) -> Lock:
        _state_dir(self.root)
        self.fd = os.open(self.root.writable(LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise HarnessError(
                f"another vmharness process (pid {holder}) is changing this host",
                "wait for it to finish; if it is gone, the lock is released with it",
            ) from exc
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            # A signal between a last `released` record and the journal's removal leaves a journal
            # with nothing outstanding: removed here, while the lock still guards it.
            with contextlib.suppress(HarnessError, OSError):
                if self.root.exists(JOURNAL) and not outstanding(read(self.root)):
                    clear(self.root)
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing releases the flock
            self.fd = -1


@dataclass(frozen=True)
class Contents:
    records: list[Record]
    torn: str | None = None  # the last line, dropped: a crash cut it mid-write (its change was not made)


def _damaged(n: int, fault: str) -> HarnessError:
    return HarnessError(f"{JOURNAL} is damaged: line {n} {fault}",
                        "look at it; host-restore cannot tell what to undo (move it away once the host is "
                        "put back by hand)")


def load(root: HostRoot) -> Contents:
    """The records in order. Any damage but a torn last line is an error naming the line."""
    text = root.read_optional(JOURNAL, limit=MAX_JOURNAL)
    if not text:
        return Contents([])
    lines = text.split("\n")
    records: list[Record] = []
    for n, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise _damaged(n, f"is {len(line):,} characters long: a record is at most {MAX_LINE:,} bytes")
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            if n == len(lines):
                return Contents(records, line)
            raise _damaged(n, "is not JSON") from None
        if not isinstance(rec, dict):
            raise _damaged(n, f"is not a record (a JSON {type(rec).__name__})")
        if not is_int(rec.get("seq")) or not isinstance(rec.get("op"), str):
            raise _damaged(n, "has no seq number or no op")
        fault = _shape(rec)
        if fault is not None:
            raise _damaged(n, fault)
        records.append(rec)
    return Contents(records)


def _shape(rec: Record) -> str | None:
    """What is wrong with a record of a known op: a field missing, or one of the wrong type (a record
    of an op this process does not know is kept as it is, see `unknown`)."""
    op = OPS.get(rec["op"])
    if op is None:
        return None
    missing = [f for f in op.fields if f not in rec]
    if missing:
        return f"is a {rec['op']!r} record without {', '.join(missing)}"
    for key, ok in {"owner": is_str, **op.types}.items():
        if key in rec and not ok(rec[key]):
            return f"is a {rec['op']!r} record whose {key} is {str(rec[key])[:40]!r}"
    return None


def read(root: HostRoot) -> list[Record]:
    return load(root).records


def record(root: HostRoot, entry: Record, owner: str | None = None) -> Record:
    """Append one record for `owner` and fsync it (and the directory, the first time) before returning.
    Only registered ops are written, each with its fields; every change names its owner."""
    op = OPS.get(entry.get("op", ""))
    if op is None:
        raise RuntimeError(f"journal op {entry.get('op')!r} is not registered: nothing could undo it")
    missing = [f for f in op.fields if f not in entry]
    if missing or (op.undo is not None and not owner):
        raise RuntimeError(f"journal record {entry} lacks {missing or ['an owner']}")
    _state_dir(root)
    path = root.writable(JOURNAL)
    new = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        entry = {"seq": journalfile.last_seq(fd, JOURNAL) + 1, "time": round(time.time(), 3),
                 **entry, **({"owner": owner} if owner else {})}
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        if len(line) > MAX_LINE:
            raise RuntimeError(f"journal record {entry['seq']} is {len(line)} bytes: over {MAX_LINE}, it could not "
                               "be read back")
        if os.fstat(fd).st_size + len(line) > MAX_JOURNAL:
            raise HarnessError(f"{JOURNAL} holds {MAX_JOURNAL >> 20} MiB of changes not given back: refusing "
                               f"to make another (a {entry['op']} record)",
                               "give them back first (host-restore, vm down, tune revert)")
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return entry


def released(records: list[Record]) -> set[int]:
    """Sequence numbers given back already (a guest shut down by `vm down`, say)."""
    return {n for r in records if r["op"] == OpKind.RELEASED for n in r.get("seqs", [])}


def outstanding(records: list[Record]) -> list[Record]:
    """The changes not yet given back, in order, each with its current owner (after hand-overs);
    records of ops this process does not know are among them (see `unknown`)."""
    done = released(records)
    owners = {n: r["to"] for r in records if r["op"] == OpKind.OWNER for n in r["seqs"]}
    out = []
    for r in records:
        op = OPS.get(r["op"])
        if r["seq"] in done or (op is not None and op.undo is None):
            continue
        out.append({**r, "owner": owners[r["seq"]]} if r["seq"] in owners else r)
    return out


def unknown(records: list[Record]) -> list[Record]:
    """Outstanding records of ops no registered subsystem knows: reported, never dropped."""
    return [r for r in outstanding(records) if r["op"] not in OPS]


def transient(owner: object) -> bool:
    """Owned by a run or bench: under the lock, a leftover of a process that is gone."""
    return isinstance(owner, str) and owner.startswith(RUN_PREFIX)


def hand_over(root: HostRoot, seqs: list[int], owner: str) -> None:
    """Make `owner` the owner of these records (a run's host preparation kept for later)."""
    if seqs:
        record(root, {"op": OpKind.OWNER, "seqs": seqs, "to": owner})


def release(root: HostRoot, seqs: list[int]) -> None:
    """Mark records as given back; when nothing else is outstanding the journal goes."""
    if seqs:
        record(root, {"op": OpKind.RELEASED, "seqs": seqs})
    records = read(root)
    left = outstanding(records)
    if not left:
        clear(root)
    elif len(left) + 1 < len(records):  # something to drop: the journal holds what is outstanding alone
        top = {"seq": max(r["seq"] for r in records), "time": round(time.time(), 3), "op": OpKind.RELEASED, "seqs": []}
        journalfile.replace(root.writable(JOURNAL), [json.dumps(r, sort_keys=True) for r in [*left, top]])


def clear(root: HostRoot) -> None:
    if root.exists(JOURNAL):
        root.remove(JOURNAL)
