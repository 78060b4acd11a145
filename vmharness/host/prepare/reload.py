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

An instance's own KVM modules (`kvm_modules`, checked by host/inspect/kvm_module.py) are loaded the
same way, by `insmod FILE` instead of `modprobe NAME`: the record also names each file (path, sha256,
srcversion) and holds each module's stock srcversion, and once loaded /sys/module/NAME/srcversion must
read the file's. Its undo always unloads them and loads the stock modules by modprobe (a copy of a
stock module reads as the stock one, so what is loaded cannot tell which file it came from).

Written here, not with a library: the reload is modprobe and rmmod, and kmod's Python bindings add no
more than the two commands do."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from vmharness.errors import HarnessError
from vmharness.host.inspect.kvm_module import Module
from vmharness.host.prepare import kmod
from vmharness.journal import journal
from vmharness.journal.journal import Op, Record
from vmharness.journal.kinds import OpKind
from vmharness.system import proc
from vmharness.system.root import HostRoot

VENDORS = ("kvm_amd", "kvm_intel")
_TOKEN = re.compile(r"[A-Za-z0-9_.,-]{1,64}")  # a value modprobe takes back as it reads
_NAME = re.compile(r"[a-z0-9_]{1,64}")
_SRCVERSION = re.compile(r"[A-F0-9]{0,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PATH = re.compile(r"/[A-Za-z0-9_.,+@%=:~/-]{1,4000}")  # as model/kvm_modules.py takes one
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


def srcversion(root: HostRoot, module: str) -> str:
    """/sys/module/MODULE/srcversion ("" when the module is not loaded or its build wrote none)."""
    value = (root.read_optional(f"/sys/module/{module}/srcversion") or "").strip()
    return value if _SRCVERSION.fullmatch(value) else ""


def taint(root: HostRoot, module: str) -> str:
    """/sys/module/MODULE/taint: the kernel's taint flags for it (`E`: loaded unsigned, `O`: built out of
    the tree, as `make M=` does); "?" when it reads as no flags can."""
    value = (root.read_optional(f"/sys/module/{module}/taint") or "").strip()
    return value if re.fullmatch(r"[A-Z]{0,32}", value) else "?"


def modules_for(root: HostRoot, keys: list[str], files: tuple[str, ...] = ()) -> list[str]:
    """The modules a reload of these knobs' modules (and of the modules named `files`, loaded from
    files) takes, in load order: kvm first when one of its own parameters is asked or it is loaded from
    a file (its vendor module goes with it), then the vendor modules loaded."""
    mods = {k.partition(".")[0] for k in keys} | set(files)
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


def _load(root: HostRoot, module: str, load: dict[str, str], file: Module | None = None) -> None:
    args = [f"{k}={v}" for k, v in sorted(load.items())]
    argv = ["insmod", "--", file.real] if file else ["modprobe", "--", module]
    res = proc.run([*argv, *args], timeout=TIMEOUT, check=False)
    if not res.ok:
        raise HarnessError(f"{argv[0]} {argv[2]} {' '.join(args)} failed: {(res.stderr or res.how).strip()[-200:]}",
                           "dmesg says why; vmharness host-restore loads it again as it was")
    if file and file.srcversion and (got := srcversion(root, module)) != file.srcversion:
        raise HarnessError(f"{file.path} loaded, and /sys/module/{module}/srcversion reads {got or 'nothing'!r}, "
                           f"not its srcversion {file.srcversion}", "dmesg may say why; the stock module was "
                           "loaded again")


def _unload(modules: list[str]) -> None:
    for m in reversed(modules):
        res = proc.run(["rmmod", "--", m], timeout=TIMEOUT, check=False)
        if not res.ok:
            raise HarnessError(f"rmmod {m} failed: {(res.stderr or res.how).strip()[-200:]}",
                               "a guest or another module took it meanwhile; vmharness host-restore gives it back")


def reload(root: HostRoot, modules: list[str], want: dict[str, str], owner: str, made: list[Record],
           files: tuple[Module, ...] = ()) -> None:
    """Reload `modules` (load order) with the parameters `want` (MODULE.NAME -> value) and every other
    load-time parameter as it reads now, those of `files` from their files; journaled first (the record
    appended to `made` at once, so that a caller gives it back however this ends). Raises if a module
    is busy, a load fails or a file's module does not read as loaded."""
    if why := busy(root, modules):
        raise HarnessError(f"cannot reload {', '.join(modules)}: {why}", "stop the guests using KVM, then run again")
    before = {m: read(root, m) for m in modules}
    entry: Record = {"op": OpKind.RELOAD, "modules": [
        {"name": m, "load": p.load, "runtime": p.runtime, **({"srcversion": srcversion(root, m)} if files else {})}
        for m, p in before.items() if p is not None]}
    if files:
        entry["files"] = [{"name": f.name, "path": f.real, "sha256": f.sha256, "srcversion": f.srcversion}
                          for f in files]
    made.append(journal.record(root, entry, owner))
    _unload([m for m in modules if before[m] is not None])
    by_name = {f.name: f for f in files}
    for m in modules:
        params = before[m]
        mine = {k.partition(".")[2]: v for k, v in want.items() if k.partition(".")[0] == m}
        _load(root, m, {**(params.load if params else {}), **mine}, by_name.get(m))


def _describe(rec: Record) -> str:
    loaded = "; ".join(f"{f['path']} loaded in place of {f['name']}" for f in rec.get("files", []))
    return "reload " + ", ".join(m["name"] for m in rec["modules"]) + " with the parameters they had" + \
        (f" ({loaded}; the stock ones by modprobe)" if loaded else "")


def _as_was(root: HostRoot, mods: list[dict[str, Any]]) -> bool:
    for m in mods:
        now = read(root, str(m["name"]))
        if now is None or any(now.load.get(k) != v for k, v in m["load"].items()):
            return False
        if m.get("srcversion") and srcversion(root, str(m["name"])) != m["srcversion"]:
            return False
    return True


def _undo(root: HostRoot, rec: Record) -> list[str]:
    mods = rec["modules"]
    names = [str(m["name"]) for m in mods]
    files = {str(f["name"]) for f in rec.get("files", [])}
    if files or not _as_was(root, mods):  # a file's module may read as the stock one: reloaded all the same
        # load order; a module loaded from a file where none was loaded before is unloaded and not loaded
        there = [n for n in ("kvm", *VENDORS) if (n in names or n in files) and root.exists(f"/sys/module/{n}")]
        if why := busy(root, there):
            return [f"{', '.join(names)} not reloaded as they were: {why}; run host-restore when no guest runs"]
        _unload(there)
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
        and params(m.get("runtime")) and isinstance(m.get("srcversion", ""), str)
        and _SRCVERSION.fullmatch(m.get("srcversion", "")) for m in v)


def _files(v: object) -> bool:
    return isinstance(v, list) and all(
        isinstance(f, dict) and set(f) == {"name", "path", "sha256", "srcversion"} and f["name"] in ("kvm", *VENDORS)
        and isinstance(f["path"], str) and _PATH.fullmatch(f["path"]) and isinstance(f["sha256"], str)
        and _SHA256.fullmatch(f["sha256"]) and isinstance(f["srcversion"], str)
        and _SRCVERSION.fullmatch(f["srcversion"]) for f in v)


journal.register(OpKind.RELOAD, Op(_describe, _undo, ("modules",), types={"modules": _modules, "files": _files}))
