"""`vmharness tune plan|apply|revert|show`: the knobs of a profile on the host, a guest or a client."""

from __future__ import annotations

import argparse
import json
from typing import Any

from vmharness import table
from vmharness.cli.live import live_root
from vmharness.errors import HarnessError
from vmharness.guest import record
from vmharness.journal import journal
from vmharness.model import profile
from vmharness.progress import say
from vmharness.system.root import HostRoot
from vmharness.tune import access, apply, knobs


def _target(args: argparse.Namespace, root: HostRoot) -> access.Target:
    where = args.target
    if where == "host":
        return access.HostTarget(root)
    if args.host_root:
        raise HarnessError("--host-root goes with --target host only", "drop --host-root")
    kind, _, name = where.partition(":")
    if kind == "client" and name:
        return access.ssh_target(name)
    if kind == "guest" and name:
        guest = record.load(root, name)
        return access.guest_target(guest.uri, guest.uuid, name)
    raise HarnessError(f"unknown target {where!r}", "use host, guest:NAME (a `vm up` guest) or client:SSHNAME")


def _ifaces(t: access.Target, given: list[str]) -> tuple[str, ...]:
    """The NICs to tune: those given, else every interface backed by a device."""
    if given:
        return tuple(given)
    return tuple(n for n in t.listdir("/sys/class/net") if t.read(f"/sys/class/net/{n}/device/uevent") is not None)


def _plan_text(plan: Any) -> str:
    rows = [[c.knob, c.path, c.before, c.after, c.why] for c in plan.changes]
    rows += [[c.knob, c.path, c.before, "(already)", c.why] for c in plan.kept]
    lines = [f"tuning plan for {plan.target}: {len(plan.changes)} changes, {len(plan.kept)} already set, "
             f"{len(plan.skips)} skipped"]
    if rows:
        lines += table.render(["KNOB", "WHERE", "NOW", "WANTED", "WHY"], rows, indent="  ")
    lines += [f"  skipped {s.knob}: {s.why}" for s in plan.skips]
    return "\n".join(lines)


def cmd_tune(args: argparse.Namespace) -> int:
    if args.action in ("apply", "revert"):
        root = live_root(args.host_root, f"tune {args.action}", "drop --host-root (and VMHARNESS_HOST_ROOT); "
                         "`tune plan --host-root DIR` shows what would change there")
    else:
        root = HostRoot.open(args.host_root if args.target == "host" else None)
    t = _target(args, root)
    if args.action in ("plan", "apply"):
        prof = profile.load(args.profile)
        plan = knobs.make(t, prof, _ifaces(t, args.iface), args.target == "host")
        if args.action == "plan":
            print(json.dumps(plan.to_json(), indent=2) if args.json else _plan_text(plan))
            return 0
        with journal.Lock(root):
            print(_plan_text(plan), flush=True)
            apply.apply(root, t, plan, say, "tune")
        print(f"applied; put back with: vmharness tune revert --target {args.target}")
        return 0
    if args.action == "revert":
        with journal.Lock(root):
            problems = apply.undo(root, apply.pending(root, t.spec()), say)
        for p in problems:
            print(f"  NOT REVERTED: {p}")
        return 1 if problems else 0
    applied = apply.pending(root, t.spec())
    plan = knobs.make(t, profile.load(args.profile), _ifaces(t, args.iface), args.target == "host")
    now = {c.path: c.before for c in plan.changes + plan.kept}
    if args.json:
        print(json.dumps({"values": now, "applied": applied}, indent=2))
    else:
        marks = {r["path"]: r["before"] for r in applied}
        for path, value in now.items():
            print(f"{path} = {value}" + (f"   (tuned; was {marks[path]})" if path in marks else ""))
    return 0


def register(subs: Any, add: Any) -> None:
    p = add(subs, "tune", cmd_tune, "plan, apply, revert or show the tuning knobs (IRQs, RPS/RFS, coalescing, "
            "sysctls, clocksource, governor, THP, KSM) on the host, a guest or a client",
            "vmharness tune plan --profile seeds --host-root snap/")
    p.add_argument("action", choices=["plan", "apply", "revert", "show"])
    p.add_argument("--target", default="host", help="host (default), guest:NAME or client:SSHNAME")
    p.add_argument("--profile", default="seeds", help="none, seeds (default) or a TOML file")
    p.add_argument("--iface", action="append", default=[],
                   help="a NIC to tune (repeatable; default: every interface backed by a device)")
