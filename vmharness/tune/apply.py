"""Apply a tuning plan, each value journaled before it is written and read back after; revert it.
A write the kernel rejects (or does not keep) stops the apply, and what was applied is put back.
The journal's `tune` op is registered here: tuning owns its undo."""

from __future__ import annotations

import contextlib
from typing import Any

from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.journal.journal import Op
from vmharness.journal.kinds import OpKind
from vmharness.progress import Say
from vmharness.signals import shielded
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


def _set(t: Target, c: Change, extra: dict[str, Any]) -> None:
    if c.path.startswith("ethtool:"):
        _ethtool(t, c.path, c.after)
        return
    if c.path == "service:irqbalance":
        _irqbalance_stop(t, extra)
        return
    now = t.set(c.path, c.after)
    if now is None or not same(_selected(c.knob, now), c.after, c.knob):
        raise HarnessError(f"{c.knob}: {c.path} reads {now!r} after writing {c.after!r}",
                           "the kernel did not keep the value; it may not apply to this device")


def _selected(knob: str, text: str) -> str:
    """THP's file lists every mode with the current one in brackets."""
    if knob == "thp" and "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text


def apply(root: HostRoot, t: Target, plan: Plan, say: Say, owner: str) -> list[dict[str, Any]]:
    """Make every change of the plan; returns the records made (tagged with `owner`: a run's id, or
    `tune` for `tune apply`). On any failure or signal, the changes made so far are reverted before
    the error is raised (the caller holds the host lock)."""
    made: list[dict[str, Any]] = []
    try:
        for c in plan.changes:
            extra = _irqbalance_how(t) if c.path == "service:irqbalance" else {}
            with shielded():  # journaled and in `made` together: a signal in between would orphan the record
                rec = journal.record(root, {"op": OpKind.TUNE, "target": t.spec(), "knob": c.knob, "path": c.path,
                                            "before": c.before, "after": c.after, **extra}, owner)
                made.append(rec)
            try:
                _set(t, c, extra)
            except HarnessError:  # refused: put back whatever part of it was made, and forget it
                made.pop()
                with contextlib.suppress(HarnessError):
                    undo_one(t, rec)
                journal.release(root, [rec["seq"]])
                raise
            say(f"{c.knob}: {c.path} {c.before} -> {c.after}")
    except BaseException:
        undo(root, made, say)
        raise
    return made


def undo_one(t: Target, rec: dict[str, Any]) -> None:
    if rec["path"].startswith("ethtool:"):
        _ethtool(t, rec["path"], rec["before"])
    elif rec["path"] == "service:irqbalance":
        _irqbalance_start(t, rec)
    else:
        t.write(rec["path"], rec["before"])


def undo(root: HostRoot, records: list[dict[str, Any]], say: Say) -> list[str]:
    """Put back what `records` changed, newest first, and release those put back; returns the
    problems (their records stay for host-restore). A signal meanwhile waits until it is done."""
    problems = []
    done = []
    with shielded():
        for rec in reversed(records):
            try:
                t = from_spec(rec["target"], root)
                if t is not None:
                    undo_one(t, rec)
                say(f"reverted {rec['knob']}: {rec['path']} -> {rec['before']}"
                    + ("" if t is not None else " (the guest is gone, and its settings with it)"))
                done.append(rec["seq"])
            except HarnessError as exc:
                problems.append(f"{rec['path']}: {exc.message}")
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
