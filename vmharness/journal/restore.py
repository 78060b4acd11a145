"""Giving back what the journal holds: the host's own ops (driver bindings, hugepages, mounts, loaded
modules) registered here, and the one undo loop every command uses — host-restore for everything, a
failed host-prepare for its own records, a run for what a dead run left (`reclaim`).

Undo goes newest record first (a run of device bindings oldest first, see `pending`). Each undo sets
the recorded state (it does not reverse an action), so a record whose change was never made is
harmless. A record that could not be given back stays in the journal, and so does one of an op this
process does not know: the journal goes only when nothing is outstanding."""

from __future__ import annotations

from collections.abc import Callable

from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages
from vmharness.host.prepare import bind, kmod
from vmharness.journal import journal
from vmharness.journal.journal import Op, Record
from vmharness.progress import Say
from vmharness.signals import shielded
from vmharness.system import proc
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


# bind -------------------------------------------------------------------------------------------
def _describe_bind(rec: Record) -> str:
    return f"{rec['bdf']}: back to {rec['driver'] or 'no driver'} (driver_override {rec['override'] or 'cleared'})"


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


def _undo_bind(root: HostRoot, rec: Record) -> list[str]:
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


# pages ------------------------------------------------------------------------------------------
def _describe_pages(rec: Record) -> str:
    return f"node {rec['node']}: {hugepages.size_label(rec['size_kib'])} hugepages back to {rec['before']}"


def _undo_pages(root: HostRoot, rec: Record) -> list[str]:
    now = hugepages.set_pages(root, rec["node"], rec["size_kib"], rec["before"])
    if now != rec["before"]:
        return [f"node {rec['node']} keeps {now} pages, not {rec['before']}: some are in use (a running guest?)"]
    return []


# mount ------------------------------------------------------------------------------------------
def _describe_mount(rec: Record) -> str:
    return f"unmount {rec['path']}" + (" and remove it" if rec.get("created") else "")


def _mounted(root: HostRoot, path: str) -> bool:
    return any(line.split()[1:2] == [path] for line in (root.read_optional("/proc/mounts") or "").splitlines())


def _undo_mount(root: HostRoot, rec: Record) -> list[str]:
    path = rec["path"]
    if _mounted(root, path):
        proc.run(["umount", str(root.writable(path, "unmount"))], timeout=30)
    if rec.get("created") and root.is_dir(path):
        root.rmdir(path)
    return []


# modules ----------------------------------------------------------------------------------------
def _describe_modules(rec: Record) -> str:
    return "unload the modules it loaded: " + ", ".join(rec["names"]) + " and what they brought along"


def _undo_modules(root: HostRoot, rec: Record) -> list[str]:
    """Unload the modules the harness loaded — those it named and the dependencies they brought, none
    that was loaded before it — users before what they use. A module someone else loaded meanwhile
    for its own use is left alone (and so is one of ours that another module now needs)."""
    ours = kmod.brought_along(root, rec["names"], set(rec.get("loaded_before", [])))
    why = kmod.unload_all(root, ours)
    return ["still loaded: " + "; ".join(f"{n} ({r})" for n, r in sorted(why.items()))] if why else []


def _netdevs(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(n, dict) and isinstance(n.get("name"), str) for n in v)


journal.register("bind", Op(_describe_bind, _undo_bind, ("bdf", "driver", "override"), types={
    "bdf": journal.is_str, "driver": journal.str_or_none, "override": journal.str_or_none, "netdevs": _netdevs}))
journal.register("pages", Op(_describe_pages, _undo_pages, ("node", "size_kib", "before"), types={
    "node": journal.is_int, "size_kib": lambda v: isinstance(v, int) and journal.is_int(v) and v > 0,
    "before": journal.is_int}))
journal.register("mount", Op(_describe_mount, _undo_mount, ("path", "created"), types={"path": journal.is_str}))
journal.register("modules", Op(_describe_modules, _undo_modules, ("names", "loaded_before"), types={
    "names": journal.strs, "loaded_before": journal.strs}))


# the undo loop ----------------------------------------------------------------------------------
def pending(root: HostRoot) -> list[Record]:
    """What host-restore would undo: newest first, except that a run of device bindings is undone
    oldest first, so drivers probe the devices in their original order and the kernel hands out the
    same interface names (eth1 before eth2). Records of unknown ops are not here (see `unknown`)."""
    out: list[Record] = []
    binds: list[Record] = []
    for rec in reversed(journal.outstanding(journal.read(root))):
        if rec["op"] == "bind":
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
