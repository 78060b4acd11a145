"""Apply a tuning plan, each value journaled before it is written and read back after; revert it.
A write the kernel rejects (or does not keep) stops the apply, and what was applied is put back.
The journal's `tune` op is registered here: tuning owns its undo.

The files among a plan's changes are written in batches, each batch one command on the target (all of
its changes journaled first), and put back so too: a guest's tuning sets about ten files, and each
command through its agent costs some 0.2 s under TCG, at every boot of a run."""

from __future__ import annotations

import contextlib
from typing import Any

from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.journal.journal import Op
from vmharness.journal.kinds import OpKind
from vmharness.progress import Say
from vmharness.signals import shielded
from vmharness.system import batched
from vmharness.system.root import HostRoot
from vmharness.tune.access import IRQBALANCE_PIDS, Target, from_spec
from vmharness.tune.plan import Change, Plan, same


def _ethtool(t: Target, path: str, value: str) -> None:
    _, iface, setting = path.split(":")
    flag = "-C" if setting == "adaptive-rx" else "-L"
    res = t.run(["ethtool", flag, iface, setting, value], check=False)
    if not res.ok and "unmodified" not in res.stderr:
        raise HarnessError(f"ethtool {flag} {iface} {setting} {value} failed on {t.label}: "
                           f"{(res.stderr.strip().splitlines() or ['?'])[-1]}", "the driver refuses this setting")


def _irqbalance_how(t: Target) -> dict[str, Any]:
    """How irqbalance runs, so that it can be started again the same way."""
    if t.run(["systemctl", "is-active", "--quiet", "irqbalance"], check=False).ok:
        return {"how": "systemd"}
    pids = t.run(["sh", "-c", IRQBALANCE_PIDS], check=False).stdout.split()
    argv = (t.read(f"/proc/{pids[0]}/cmdline") or "irqbalance").split("\0") if pids else ["irqbalance"]
    return {"how": "process", "argv": [a for a in argv if a], "pids": pids}


def _irqbalance_stop(t: Target, how: dict[str, Any]) -> None:
    if how["how"] == "systemd":
        t.run(["systemctl", "stop", "irqbalance"])
    for pid in how.get("pids", []):
        t.run(["kill", pid], check=False)


def _irqbalance_start(t: Target, rec: dict[str, Any]) -> None:
    if rec.get("how") == "systemd":
        t.run(["systemctl", "start", "irqbalance"])
    else:
        t.run(rec.get("argv") or ["irqbalance"])


def _set_one(t: Target, c: Change, extra: dict[str, Any]) -> None:
    """A change that is not a file's: an ethtool setting, or irqbalance stopped."""
    if c.path.startswith("ethtool:"):
        _ethtool(t, c.path, c.after)
    else:
        _irqbalance_stop(t, extra)


def is_file(path: str) -> bool:
    """Whether a change's path is a file's (not an ethtool setting or a service)."""
    return not path.startswith(("ethtool:", "service:"))


def _kept(c: Change, got: batched.Answer) -> HarnessError | None:
    """Why a file's write did not take (its refusal, or what it reads instead), or None."""
    if isinstance(got, HarnessError):
        return got
    if got is None or not same(_selected(c.knob, got), c.after, c.knob):
        return HarnessError(f"{c.knob}: {c.path} reads {got!r} after writing {c.after!r}",
                            "the kernel did not keep the value; it may not apply to this device")
    return None


def _selected(knob: str, text: str) -> str:
    """THP's file lists every mode with the current one in brackets."""
    if knob == "thp" and "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text


def _batches(changes: list[Change]) -> list[list[Change]]:
    """The changes in order, the files among them in runs of their own (one command each)."""
    out: list[list[Change]] = []
    for c in changes:
        if out and is_file(c.path) and is_file(out[-1][-1].path):
            out[-1].append(c)
        else:
            out.append([c])
    return out


def apply(root: HostRoot, t: Target, plan: Plan, say: Say, owner: str) -> list[dict[str, Any]]:
    """Make every change of the plan; returns the records made (tagged with `owner`: a run's id, or
    `tune` for `tune apply`). On any failure or signal, the changes made so far are reverted before
    the error is raised (the caller holds the host lock)."""
    made: list[dict[str, Any]] = []
    try:
        for batch in _batches(plan.changes):
            extra = _irqbalance_how(t) if batch[0].path == "service:irqbalance" else {}
            with shielded():  # journaled and in `made` together: a signal in between would orphan a record
                recs = [journal.record(root, {"op": OpKind.TUNE, "target": t.spec(), "knob": c.knob, "path": c.path,
                                              "before": c.before, "after": c.after, **extra}, owner) for c in batch]
                made += recs
            _take(root, t, batch, recs, extra, made, say)
    except BaseException:
        undo(root, made, say)
        raise
    return made


def _take(root: HostRoot, t: Target, batch: list[Change], recs: list[dict[str, Any]], extra: dict[str, Any],
          made: list[dict[str, Any]], say: Say) -> None:
    """Make one batch's changes, journaled as `recs` (the last of `made`). The first that does not take
    is put back as far as it was made and forgotten, with those after it (never tried), and raised. A
    batch whose command failed as a whole stays in `made`: any of it may have been written."""
    problem: HarnessError | None = None
    n = 0
    if is_file(batch[0].path):
        for c, got in zip(batch, t.set_many([(c.path, c.after) for c in batch]), strict=False):
            if (problem := _kept(c, got)) is not None:
                break
            say(f"{c.knob}: {c.path} {c.before} -> {c.after}")
            n += 1
        if problem is None and n < len(batch):
            problem = HarnessError(f"{batch[n].knob}: {t.label} answered no write of {batch[n].path}",
                                   "the target's shell or its connection failed mid-way: try again")
    else:
        try:
            _set_one(t, batch[0], extra)
        except HarnessError as exc:
            problem = exc
        else:
            say(f"{batch[0].knob}: {batch[0].path} {batch[0].before} -> {batch[0].after}")
    if problem is None:
        return
    failed, untried = recs[n], recs[n + 1:]
    del made[len(made) - len(recs) + n:]
    with contextlib.suppress(HarnessError):  # refused: put back whatever part of it was made
        undo_one(t, failed)
    journal.release(root, [failed["seq"], *(r["seq"] for r in untried)])
    raise problem


def undo_one(t: Target, rec: dict[str, Any]) -> None:
    if is_file(rec["path"]):
        if (problem := t.write_many([(rec["path"], rec["before"])])[0]) is not None:
            raise problem
    elif rec["path"].startswith("ethtool:"):
        _ethtool(t, rec["path"], rec["before"])
    else:
        _irqbalance_start(t, rec)


def _undo_batches(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Records in the order given, consecutive files of one target together (one command each)."""
    out: list[list[dict[str, Any]]] = []
    for rec in records:
        last = out[-1][-1] if out else None
        if last is not None and is_file(rec["path"]) and is_file(last["path"]) and rec["target"] == last["target"]:
            out[-1].append(rec)
        else:
            out.append([rec])
    return out


def _put_back(root: HostRoot, batch: list[dict[str, Any]]) -> tuple[Target | None, list[HarnessError | None]]:
    """One batch's records put back: their target (None: a guest that is gone, its settings with it)
    and, for each record, the error putting it back was, or None."""
    t = from_spec(batch[0]["target"], root)
    if t is None:
        return None, [None] * len(batch)
    if is_file(batch[0]["path"]):
        return t, t.write_many([(rec["path"], rec["before"]) for rec in batch])
    try:
        undo_one(t, batch[0])
    except HarnessError as exc:
        return t, [exc]
    return t, [None]


def undo(root: HostRoot, records: list[dict[str, Any]], say: Say) -> list[str]:
    """Put back what `records` changed, newest first, and release those put back; returns the
    problems (their records stay for host-restore). A signal meanwhile waits until it is done."""
    problems = []
    done = []
    with shielded():
        for batch in _undo_batches(list(reversed(records))):
            try:
                t, errors = _put_back(root, batch)
            except HarnessError as exc:  # the target cannot be reached, or its command failed as a whole
                t, errors = None, [exc] * len(batch)
            for rec, error in zip(batch, errors, strict=True):
                if error is not None:
                    problems.append(f"{rec['path']}: {error.message}")
                    continue
                say(f"reverted {rec['knob']}: {rec['path']} -> {rec['before']}"
                    + ("" if t is not None else " (the guest is gone, and its settings with it)"))
                done.append(rec["seq"])
        if records:
            journal.release(root, done)
    return problems


def _describe(rec: dict[str, Any]) -> str:
    where = rec["target"].get("name") or rec["target"].get("ssh") or "host"
    return f"{where}: {rec['path']} back to {rec['before']}"


def _undo_record(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    target = from_spec(rec["target"], root)
    if target is not None:  # None: a guest that is gone took its settings with it
        undo_one(target, rec)
    return []


journal.register(OpKind.TUNE, Op(_describe, _undo_record, ("target", "knob", "path", "before", "after")))


def pending(root: HostRoot, spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Tuning records not yet reverted, oldest first (for one target, or all)."""
    return [r for r in journal.outstanding(journal.read(root)) if r["op"] == OpKind.TUNE
            and (spec is None or r["target"] == spec)]
