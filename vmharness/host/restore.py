"""host-restore: undo the journal, newest record first (a run of device bindings oldest first, see
`pending`), then remove it. Each undo sets the recorded
state (it does not reverse an action), so a record whose change was never made is harmless."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from vmharness import proc
from vmharness.errors import HarnessError
from vmharness.host import bind, hugepages, journal, kmod
from vmharness.host.root import HostRoot
from vmharness.machine import Machine, stop_process

Say = Callable[[str], None]


def describe(rec: dict[str, Any]) -> str:
    op = rec.get("op")
    if op == "bind":
        return f"{rec['bdf']}: back to {rec['driver'] or 'no driver'} (driver_override {rec['override'] or 'cleared'})"
    if op == "pages":
        return (f"node {rec['node']}: {hugepages.size_label(rec['size_kib'])} hugepages back to {rec['before']}")
    if op == "mount":
        return f"unmount {rec['path']}" + (" and remove it" if rec.get("created") else "")
    if op == "modules":
        return "unload the modules loaded since: " + ", ".join(rec["names"]) + " and their dependencies"
    if op == "domain":
        return f"guest {rec['name']} ({rec['uri']}): destroy and undefine"
    if op == "tune":
        where = rec["target"].get("name") or rec["target"].get("ssh") or "host"
        return f"{where}: {rec['path']} back to {rec['before']}"
    if op == "process":
        return f"stop {rec['what']} (pid {rec['pid']}" + (f" on {rec['ssh']})" if rec.get("ssh") else ")")
    if op == "file":
        return f"remove {rec['path']}" + (f" on {rec['ssh']}" if rec.get("ssh") else "")
    return str(op)


def _mounted(root: HostRoot, path: str) -> bool:
    return any(line.split()[1:2] == [path] for line in (root.read_optional("/proc/mounts") or "").splitlines())


def _undo_mount(root: HostRoot, rec: dict[str, Any]) -> None:
    path = rec["path"]
    if _mounted(root, path):
        proc.run(["umount", str(root.path(path))], timeout=30)
    if rec.get("created") and root.is_dir(path):
        os.rmdir(root.path(path))


def _undo_pages(root: HostRoot, rec: dict[str, Any]) -> str | None:
    now = hugepages.set_pages(root, rec["node"], rec["size_kib"], rec["before"])
    if now != rec["before"]:
        return f"node {rec['node']} keeps {now} pages, not {rec['before']}: some are in use (a running guest?)"
    return None


def _netdev_back(root: HostRoot, bdf: str, name: str) -> bool:
    """Wait for the device's interface; give it back its old name if the kernel chose another."""
    dev_net = f"{bind.DEV}/{bdf}/net"
    if not bind.wait_for(root, dev_net, timeout=10):
        return False
    now = root.listdir(dev_net)
    if name in now:
        return True
    if len(now) == 1 and not root.exists(f"/sys/class/net/{name}"):
        proc.run(["ip", "link", "set", "dev", now[0], "name", name], timeout=10)
    return bind.wait_for(root, f"/sys/class/net/{name}", timeout=5)


def _undo_bind(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    bind.to_driver(root, rec["bdf"], rec["driver"], rec["override"])
    problems = []
    for n in rec.get("netdevs", []):
        name = n["name"]
        if not _netdev_back(root, rec["bdf"], name):
            problems.append(f"{rec['bdf']}: interface {name} did not come back under that name")
            continue
        for attr in ("mtu", "flags"):
            if n.get(attr) is not None and root.read_optional(f"/sys/class/net/{name}/{attr}") != n[attr]:
                root.write_text(f"/sys/class/net/{name}/{attr}", n[attr])
    return problems


def _undo_modules(root: HostRoot, rec: dict[str, Any]) -> str | None:
    """Unload every module that was not loaded before, users before what they use: each round removes
    those nothing depends on any more, until none are left or a round removes nothing."""
    before = set(rec.get("loaded_before", []))
    why: dict[str, str] = {}
    while True:
        extra = sorted(set(kmod.loaded(root)) - before)
        if not extra:
            return None
        for name in extra:
            reason = kmod.unload(name)
            if reason:
                why[name] = reason
        if set(kmod.loaded(root)) - before == set(extra):
            return "still loaded: " + "; ".join(f"{n} ({why.get(n, '?')})" for n in extra)


def _forget_guest(root: HostRoot, rec: dict[str, Any]) -> None:
    """Drop `vm up`'s note about a guest that is gone now (see vmharness.guest.vm.STATE)."""
    note = f"/run/vmharness/vms/{rec['name'].removeprefix('vmh-')}.json"
    text = root.read_optional(note)
    if text is not None and f'"{rec["uuid"]}"' in text:
        os.unlink(root.path(note))


def pending(root: HostRoot) -> list[dict[str, Any]]:
    """What host-restore would undo: newest first, except that a run of device bindings is undone
    oldest first, so drivers probe the devices in their original order and the kernel hands out the
    same interface names (eth1 before eth2)."""
    out: list[dict[str, Any]] = []
    binds: list[dict[str, Any]] = []
    records = journal.read(root)
    done = journal.released(records)
    for rec in reversed(records):
        if rec["seq"] in done:
            continue
        if rec.get("op") == "bind":
            binds.insert(0, rec)
            continue
        out += binds
        binds = []
        if rec.get("op") in ("pages", "mount", "modules", "domain", "file", "process", "tune"):
            out.append(rec)
    return out + binds


def undo(root: HostRoot, say: Say, only: Callable[[dict[str, Any]], bool] | None = None) -> list[str]:
    """Undo every journaled change (or those `only` selects); returns the problems that remain (empty:
    host as it was). Undone records are released; the journal goes when nothing is outstanding."""
    problems: list[str] = []
    done: list[int] = []
    for rec in pending(root):
        if only is not None and not only(rec):
            continue
        op = rec["op"]
        try:
            if op == "mount":
                _undo_mount(root, rec)
            elif op == "pages":
                problems += filter(None, [_undo_pages(root, rec)])
            elif op == "bind":
                problems += _undo_bind(root, rec)
            elif op == "modules":
                problems += filter(None, [_undo_modules(root, rec)])
            elif op == "domain":
                from vmharness.host import libvirt_conn  # libvirt only when a guest is recorded

                libvirt_conn.remove(rec["uri"], rec["uuid"])
                _forget_guest(root, rec)
            elif op == "tune":
                from vmharness.tune import access, apply  # the tuning layer only when it left something

                target = access.from_spec(rec["target"], root)
                if target is not None:
                    apply.undo_one(target, rec)
            elif op == "process":
                stop_process(Machine(rec.get("ssh")), rec["pid"], 10, rec.get("start_time"))
            elif op == "file":
                Machine(rec.get("ssh")).run(["rm", "-f", "--", rec["path"]], timeout=60)
        except (HarnessError, OSError) as exc:
            problems.append(f"{describe(rec)}: {exc}")
            continue
        done.append(rec["seq"])
        say(f"undone: {describe(rec)}")
    if only is None and not problems:
        journal.clear(root)
    elif done:
        journal.release(root, done)
    return problems
