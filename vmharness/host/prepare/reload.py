"""KVM module parameters read only when the module loads (`kvm_amd.npt`, `kvm_intel.ept`,
`kvm.mitigate_smt_rsb`, ...): set for an instance by reloading the module while no guest runs, and
given back by reloading it as it was.

A reload takes away every guest's KVM, so it is done only when the vendor module's reference count is
zero (no VM holds /dev/kvm) and nothing else uses kvm. Before it unloads anything, the journal gets one
record (op `reload`) holding each module's parameters as they read: those read only at load, passed
again on every load so that a module someone loaded with options by hand comes back with them, and
those writable at run time, written back after the load that gives the module back. With the module
reloaded, each knob is read back; a value the kernel did not take is an error (and the module is given
back). The undo is the same whether the run ends, fails, is killed mid-reload (a module left unloaded
is loaded again) or `host-restore` runs later; a module that is in use then is left as it is and said.

Written here, not with a library: the reload is modprobe and rmmod, and kmod's Python bindings add no
more than the two commands do."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.host.prepare import kmod
from vmharness.journal import journal
from vmharness.journal.journal import Op, Record
from vmharness.journal.kinds import OpKind
from vmharness.system import proc
from vmharness.system.root import HostRoot

VENDORS = ("kvm_amd", "kvm_intel")
_TOKEN = re.compile(r"[A-Za-z0-9_.,-]{1,64}")  # a value modprobe takes back as it reads
_NAME = re.compile(r"[a-z0-9_]{1,64}")
TIMEOUT = 60.0


@dataclass(frozen=True)
class Params:
    load: dict[str, str]  # read only: taken at load, passed again on each load
    runtime: dict[str, str]  # writable now: written back after a load


def _dir(module: str) -> str:
    return f"/sys/module/{module}/parameters"


def read(root: HostRoot, module: str) -> Params | None:
    """A loaded module's parameters as they read (None when it is not loaded); a value that is not a
    plain token (a message such as 'not required') is neither passed nor written back."""
    if not root.exists(f"/sys/module/{module}"):
        return None
    load: dict[str, str] = {}
    runtime: dict[str, str] = {}
    for name in root.listdir(_dir(module)):
        path = f"{_dir(module)}/{name}"
        value = (root.read_optional(path) or "").strip()
        if not _NAME.fullmatch(name) or not _TOKEN.fullmatch(value):
            continue
        try:
            writable = bool(os.stat(root.path(root.realpath(path))).st_mode & 0o200)
        except OSError as exc:
            raise root.fault(path, exc) from exc
        (runtime if writable else load)[name] = value
    return Params(load, runtime)


def modules_for(root: HostRoot, keys: list[str]) -> list[str]:
    """The modules a reload of these knobs' modules takes, in load order: kvm first when one of its own
    parameters is asked (its vendor module goes with it), then the vendor modules loaded."""
    mods = {k.partition(".")[0] for k in keys}
    if "kvm" in mods:
        mods |= {v for v in VENDORS if root.exists(f"/sys/module/{v}")}
    return [m for m in ("kvm", *VENDORS) if m in mods]


def busy(root: HostRoot, modules: list[str], strict: bool = True) -> str | None:
    """Why these modules cannot be reloaded now, or None: a vendor module with references (a guest
    holds KVM), or kvm used by a module other than its vendor ones. Not `strict` (a preview, perhaps
    of a snapshot that did not keep it): an unknown reference count is no reason."""
    for m in modules:
        if m in VENDORS:
            refs = (root.read_optional(f"/sys/module/{m}/refcnt") or "").strip()
            if refs != "0" and (strict or refs):
                return f"{m} is in use (refcnt {refs or '?'}): a guest is running under KVM"
        elif m == "kvm":
            users = kmod.users(root).get("kvm", set())
            if users - set(VENDORS):
                return f"kvm is used by {', '.join(sorted(users - set(VENDORS)))}, which a reload would unload too"
    return None


def _load(root: HostRoot, module: str, load: dict[str, str]) -> None:
    args = [f"{k}={v}" for k, v in sorted(load.items())]
    res = proc.run(["modprobe", "--", module, *args], timeout=TIMEOUT, check=False)
    if not res.ok:
        raise HarnessError(f"modprobe {module} {' '.join(args)} failed: {(res.stderr or res.how).strip()[-200:]}",
                           "dmesg says why; vmharness host-restore loads it again as it was")


def _unload(modules: list[str]) -> None:
    for m in reversed(modules):
        res = proc.run(["rmmod", "--", m], timeout=TIMEOUT, check=False)
        if not res.ok:
            raise HarnessError(f"rmmod {m} failed: {(res.stderr or res.how).strip()[-200:]}",
                               "a guest or another module took it meanwhile; vmharness host-restore gives it back")


def reload(root: HostRoot, modules: list[str], want: dict[str, str], owner: str) -> Record:
    """Reload `modules` (load order) with the parameters `want` (MODULE.NAME -> value) and every other
    load-time parameter as it reads now; journaled first. Raises if a module is busy or a load fails."""
    if why := busy(root, modules):
        raise HarnessError(f"cannot reload {', '.join(modules)}: {why}", "stop the guests using KVM, then run again")
    before = {m: read(root, m) for m in modules}
    rec = journal.record(root, {"op": OpKind.RELOAD, "modules": [
        {"name": m, "load": p.load, "runtime": p.runtime} for m, p in before.items() if p is not None]}, owner)
    _unload([m for m in modules if before[m] is not None])
    for m in modules:
        params = before[m]
        mine = {k.partition(".")[2]: v for k, v in want.items() if k.partition(".")[0] == m}
        _load(root, m, {**(params.load if params else {}), **mine})
    return rec


def _describe(rec: Record) -> str:
    return "reload " + ", ".join(m["name"] for m in rec["modules"]) + " with the parameters they had"


def _as_was(root: HostRoot, mods: list[dict[str, dict[str, str]]]) -> bool:
    for m in mods:
        now = read(root, str(m["name"]))
        if now is None or any(now.load.get(k) != v for k, v in m["load"].items()):
            return False
    return True


def _undo(root: HostRoot, rec: Record) -> list[str]:
    mods = rec["modules"]
    names = [str(m["name"]) for m in mods]
    if not _as_was(root, mods):
        if why := busy(root, [n for n in names if root.exists(f"/sys/module/{n}")]):
            return [f"{', '.join(names)} not reloaded as they were: {why}; run host-restore when no guest runs"]
        _unload([n for n in names if root.exists(f"/sys/module/{n}")])
        for m in mods:
            _load(root, str(m["name"]), m["load"])
    for m in mods:  # a reload sets the run-time ones to their defaults: written back as they were
        for k, v in m["runtime"].items():
            path = f"{_dir(str(m['name']))}/{k}"
            if (root.read_optional(path) or "").strip() != v:
                root.write_text(path, v)
    return [] if _as_was(root, mods) else [f"{', '.join(names)} do not read as they did after the reload"]


def _modules(v: object) -> bool:
    def params(p: object) -> bool:
        return isinstance(p, dict) and all(isinstance(k, str) and _NAME.fullmatch(k) and isinstance(x, str)
                                           and _TOKEN.fullmatch(x) for k, x in p.items())
    return isinstance(v, list) and bool(v) and all(
        isinstance(m, dict) and m.get("name") in ("kvm", *VENDORS) and params(m.get("load"))
        and params(m.get("runtime")) for m in v)


journal.register(OpKind.RELOAD, Op(_describe, _undo, ("modules",), types={"modules": _modules}))
