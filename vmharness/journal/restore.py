"""Giving back what the journal holds: the one undo loop every command uses — host-restore for everything, a
failed host-prepare for its own records, a run for what a dead run left (`reclaim`).

Undo goes newest record first (a run of device bindings oldest first, see `pending`). Each undo sets
the recorded state (it does not reverse an action), so a record whose change was never made is
harmless. A record that could not be given back stays in the journal, and so does one of an op this
process does not know: the journal goes only when nothing is outstanding."""

from __future__ import annotations

from collections.abc import Callable

from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.journal.journal import Record
from vmharness.journal.kinds import OpKind
from vmharness.progress import Say
from vmharness.signals import shielded
from vmharness.system.root import HostRoot


def describe(rec: Record) -> str:
    op = journal.OPS.get(rec["op"])
    if op is None:
        return f"{rec['op']} (a record this vmharness does not know)"
    try:
        return op.describe(rec)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field of a shape its op does not know
        raise HarnessError(f"{journal.JOURNAL}: record {rec['seq']} ({rec['op']}) is damaged: "
                           f"{type(exc).__name__} {str(exc)[:60]}", "look at it; put the host back by hand, "
                           "then move the journal away") from exc


# the undo loop ----------------------------------------------------------------------------------
def pending(root: HostRoot) -> list[Record]:
    """What host-restore would undo: newest first, except that a run of device bindings is undone
    oldest first, so drivers probe the devices in their original order and the kernel hands out the
    same interface names (eth1 before eth2). Records of unknown ops are not here (see `unknown`)."""
    out: list[Record] = []
    binds: list[Record] = []
    for rec in reversed(journal.outstanding(journal.read(root))):
        if rec["op"] == OpKind.BIND:
            binds.insert(0, rec)
            continue
        out += binds
        binds = []
        if rec["op"] in journal.OPS and _kept(rec) is None:
            out.append(rec)
    return out + binds


def _kept(rec: Record) -> str | None:
    """Why a record of a known op is never undone (its op's `kept`: a `file` record naming a path outside
    the harness's folders), or None."""
    kept = journal.OPS[rec["op"]].kept
    return kept(rec) if kept is not None else None


def kept_text(records: list[Record]) -> list[str]:
    """One line per outstanding record that is kept, never undone (see `_kept`): host-restore names it."""
    return [f"{journal.JOURNAL}: record {r['seq']} ({describe(r)}): {why}: it is kept (undo it by hand if it "
            "is yours, then remove the journal)"
            for r in journal.outstanding(records) if r["op"] in journal.OPS and (why := _kept(r)) is not None]


def unknown_text(strange: list[Record]) -> list[str]:
    """One line per record of an op this vmharness does not know (journal.unknown): it is kept."""
    return [f"{journal.JOURNAL}: record {r['seq']} has op {r['op']!r}, which this vmharness does not know: "
            "it is kept (a newer vmharness wrote it? undo it by hand, then remove the journal)"
            for r in strange]


def undo(root: HostRoot, say: Say, only: Callable[[Record], bool] | None = None) -> list[str]:
    """Undo every journaled change (or those `only` selects); returns the problems that remain (empty:
    given back). A signal that arrives meanwhile waits until the loop is done. Undone records are
    released; the journal goes when nothing is outstanding."""
    problems: list[str] = []
    done: list[int] = []
    with shielded():
        for rec in pending(root):
            if only is not None and not only(rec):
                continue
            undo_one = journal.OPS[rec["op"]].undo
            assert undo_one is not None  # pending holds changes only
            try:
                left = undo_one(root, rec)
            except (HarnessError, OSError) as exc:
                left = [str(exc)]
            if left:
                problems += [f"{describe(rec)}: {p}" for p in left]
                continue
            done.append(rec["seq"])
            say(f"undone: {describe(rec)}")
        journal.release(root, done)
    return problems


def reclaim(root: HostRoot, say: Say) -> list[str]:
    """Give back what runs and benches that are gone left (their `run:` records); the caller holds the
    lock, which proves them gone. What host-prepare, `vm up` or `tune apply` keep is not touched."""
    records = journal.read(root)
    left = [r for r in journal.outstanding(records) if journal.transient(r.get("owner"))]
    if not left:
        return []
    say(f"giving back {len(left)} things that an interrupted run left (owners "
        + ", ".join(sorted({r['owner'] for r in left})) + ")")
    strange = [r for r in left if r["op"] not in journal.OPS]
    problems = undo(root, say, only=lambda rec: journal.transient(rec.get("owner")))
    return problems + unknown_text(strange) + kept_text(left)
