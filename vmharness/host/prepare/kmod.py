"""Loading and unloading kernel modules, and telling exactly which ones the harness brought in: the
modules it named and the dependencies they pulled along, never one that was there before."""

from __future__ import annotations

from vmharness.journal import journal
from vmharness.journal.journal import Op, Record
from vmharness.journal.kinds import OpKind
from vmharness.system import proc
from vmharness.system.root import HostRoot

MODPROBE_TIMEOUT = 60.0


def users(root: HostRoot) -> dict[str, set[str]]:
    """Loaded module -> the loaded modules that use it, from /proc/modules."""
    out: dict[str, set[str]] = {}
    for line in (root.read_optional("/proc/modules") or "").splitlines():
        fields = line.split()
        if fields:
            used_by = fields[3] if len(fields) > 3 else "-"
            out[fields[0]] = {u for u in used_by.split(",") if u and u != "-"}
    return out


def loaded(root: HostRoot) -> list[str]:
    """Names of loaded modules, from /proc/modules."""
    return sorted(users(root))


def load(name: str) -> None:
    proc.run(["modprobe", name], timeout=MODPROBE_TIMEOUT)


def brought_along(root: HostRoot, names: list[str], before: set[str]) -> set[str]:
    """The loaded modules that loading `names` brought: those named and, transitively, what they use,
    less everything that was loaded `before`."""
    used = users(root)
    wanted = {n.replace("-", "_") for n in names}
    ours: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in ours or name in before or name not in used:
            continue
        ours.add(name)
        wanted |= {dep for dep, who in used.items() if name in who}
    return ours


def unload_all(root: HostRoot, names: set[str]) -> dict[str, str]:
    """rmmod each of `names` still loaded, users before what they use: each round removes those no
    other module uses any more, until none is left or a round removes nothing. Returns module ->
    why it stays (in use by someone else, say)."""
    why: dict[str, str] = {}
    while True:
        left = names & set(loaded(root))
        if not left:
            return {}
        for name in sorted(left):
            res = proc.run(["rmmod", "--", name], timeout=MODPROBE_TIMEOUT, check=False)
            if not res.ok:
                why[name] = (res.stderr.strip() or res.stdout.strip() or res.how).splitlines()[-1]
        if names & set(loaded(root)) == left:
            return {n: why.get(n, "?") for n in left}


# the journal's modules op: what the harness loaded, unloaded -----------------------------------------
def _describe_modules(rec: Record) -> str:
    return "unload the modules it loaded: " + ", ".join(rec["names"]) + " and what they brought along"


def _undo_modules(root: HostRoot, rec: Record) -> list[str]:
    """Unload the modules the harness loaded — those it named and the dependencies they brought, none
    that was loaded before it — users before what they use. A module someone else loaded meanwhile
    for its own use is left alone (and so is one of ours that another module now needs)."""
    ours = brought_along(root, rec["names"], set(rec.get("loaded_before", [])))
    why = unload_all(root, ours)
    return ["still loaded: " + "; ".join(f"{n} ({r})" for n, r in sorted(why.items()))] if why else []


journal.register(OpKind.MODULES, Op(_describe_modules, _undo_modules, ("names", "loaded_before"), types={
    "names": journal.strs, "loaded_before": journal.strs}))
