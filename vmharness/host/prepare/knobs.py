"""Host knobs for one instance's guest (model/hostknobs.py): checked on the host, set before the guest
boots, read back, given back once it has stopped.

Each knob is a file: /sys/module/MODULE/parameters/NAME, or /sys/devices/system/cpu/smt/control.
`plan` reads them through HostRoot (so a `--host-root` snapshot answers as the host would): the file
must exist and be writable now (its mode; a load-only parameter is 0444), and hold a value the knob
can be given back to; a parameter read only at load needs its module free to reload (reload.py, which
`apply` calls first: op `reload`). `apply` journals each file's value (op `hostknob`) before it writes
it, then reads it back: a value the kernel did not take is an error, and what was set is given back at once.
`give_back` undoes them through the journal's one undo loop, as host-restore would; so does a later
run or host-restore after a SIGKILL. A knob no instance named is never touched.

An instance's own KVM modules (`kvm_modules`) go with its knobs: each file checked on this host
(host/inspect/kvm_module.py) by `check_all` before the run changes anything and again by `apply`, and
loaded in place of the stock modules by the same reload (reload.py), with the knobs read only at load;
what was loaded (path, sha256, srcversion) goes into the run's record beside the knobs.

SMT off takes CPUs away: what it took is kept for the run's record, and the guest's placement, planned
once it is off, must use none of them (`check_placement`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from vmharness.cpus import format_cpulist, parse_cpulist
from vmharness.errors import HarnessError
from vmharness.host.inspect import kvm_module
from vmharness.host.prepare import reload
from vmharness.journal import journal, restore
from vmharness.journal.journal import Op, Record
from vmharness.journal.kinds import OpKind
from vmharness.model.hostknobs import KNOBS, SMT
from vmharness.progress import Say
from vmharness.system import sysfs
from vmharness.system.root import HostRoot

CPU = sysfs.CPU
SMT_CONTROL = f"{CPU}/smt/control"
ONLINE = f"{CPU}/online"
ITLB = f"{CPU}/vulnerabilities/itlb_multihit"
_PARAM = re.compile(r"/sys/module/(kvm|kvm_intel|kvm_amd)/parameters/[a-z0-9_]{1,64}")
_VALUE = re.compile(r"[A-Za-z0-9_ -]{1,32}")  # what a knob's file reads: Y, N, 60, cond, on ...


def path_of(key: str) -> str:
    knob = KNOBS[key]
    return SMT_CONTROL if key == SMT else f"/sys/module/{knob.module}/parameters/{knob.name}"


@dataclass(frozen=True)
class Step:
    """One knob to set: its file, the value to write, and what it reads now."""

    key: str
    path: str
    value: str
    now: str


def _refuse(inst: str, key: str, what: str, hint: str) -> HarnessError:
    return HarnessError(f"instance {inst}: host.{key}: {what}", hint)


def _step(root: HostRoot, inst: str, key: str, value: str | int) -> Step:
    path = path_of(key)
    module = KNOBS[key].module
    now = root.read_optional(path)
    if now is None:
        raise _refuse(inst, key, f"{path} is not present on this host", "this kernel has no SMT control" if key == SMT
                      else f"is {module} loaded? (modprobe {module}; kvm_intel on Intel, kvm_amd on AMD)")
    if not _VALUE.fullmatch(now):
        raise _refuse(inst, key, f"{path} reads {now[:40]!r}, which vmharness does not know",
                      "the host root is damaged, or this kernel writes something new")
    if key == SMT and now not in ("on", "off"):
        raise _refuse(inst, key, f"SMT cannot be switched on this host: {path} reads {now!r}",
                      "notsupported: the CPU has no SMT threads; forceoff: off until the next boot; drop smt")
    if key == "kvm_intel.vmentry_l1d_flush" and now not in ("always", "cond", "never"):
        raise _refuse(inst, key, f"KVM ignores it here: {path} reads {now!r}",
                      "'not required': this CPU has no L1TF; 'EPT disabled': nothing to flush for; drop it")
    if KNOBS[key].reload:  # set by a reload (reload.py): what may stop it is checked by plan
        return Step(key, path, str(value), now)
    try:
        mode = os.stat(root.path(root.realpath(path))).st_mode
    except OSError as exc:
        raise root.fault(path, exc) from exc
    if not mode & 0o200:
        raise _refuse(inst, key, f"{path} is read only (mode {mode & 0o777:o}): this kernel's {module} takes "
                      "it only when it is loaded", "set it in modprobe.d before the run")
    return Step(key, path, str(value), now)


def plan(root: HostRoot, inst: str, knobs: dict[str, str | int], strict: bool = False,
         files: tuple[kvm_module.Module, ...] = ()) -> list[Step]:
    """The knobs `inst` names, each checked on this host (present, writable now or its module free to
    reload), and its modules from `files` free to be loaded in place of the stock ones: an error names
    the instance and the knob, with a hint. `strict`: right before they are set (a reference count a
    snapshot did not keep is then a refusal)."""
    steps = [_step(root, inst, key, value) for key, value in knobs.items()]
    loading = [s.key for s in steps if KNOBS[s.key].reload]
    names = tuple(f.name for f in files)
    if (loading or names) and (why := reload.busy(root, reload.modules_for(root, loading, names), strict)):
        raise _refuse(inst, loading[0], f"its module must be reloaded, and {why}",
                      "stop the guests using KVM on this host first (virsh list), then run again") if loading else \
            HarnessError(f"instance {inst}: kvm_modules: the stock modules must be unloaded, and {why}",
                         "stop the guests using KVM on this host first (virsh list), then run again")
    return steps


def _took(key: str, value: str, got: str, itlb: str | None) -> bool:
    """Whether `got`, read back after writing `value`, is the kernel taking it."""
    if key == "kvm.nx_huge_pages":
        if value == "auto":  # the kernel decides, by the CPU's iTLB multihit bug
            return got in ({"N"} if itlb == "Not affected" else {"Y", "N"})
        return got == {"force": "Y", "off": "N"}[value]
    return got == value


@dataclass
class Applied:
    """What `apply` set for one instance: the journal records to give back, and the run's record."""

    made: list[Record] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    smt_taken: tuple[int, ...] = ()


def _online(root: HostRoot) -> tuple[int, ...]:
    return parse_cpulist(root.read_text(ONLINE).strip(), ONLINE)


def apply(root: HostRoot, inst: str, knobs: dict[str, str | int], owner: str, say: Say,
          modules: tuple[str, ...] = ()) -> Applied:
    """Set the knobs `inst` names and load its `modules` (files; checked again: the host may have
    changed since), each journaled first and read back. On any error, what was set is given back
    before the error goes up."""
    out = Applied()
    if not knobs and not modules:
        return out
    files = tuple(kvm_module.check_all(modules, f"instance {inst}: kvm_modules")) if modules else ()
    steps = plan(root, inst, knobs, strict=True, files=files)
    try:
        loading = {s.key: s.value for s in steps if KNOBS[s.key].reload}
        if loading or files:
            names = tuple(f.name for f in files)
            reload.reload(root, reload.modules_for(root, list(loading), names), loading, owner, out.made, files)
            if files:
                out.report["kvm_modules"] = [{**f.to_json(), "reads": reload.srcversion(root, f.name),
                                              "taint": reload.taint(root, f.name)} for f in files]
                say(f"KVM modules for {inst}: " + ", ".join(f"{f.path} as {f.name} (srcversion "
                                                          f"{f.srcversion or 'none'})" for f in files))
            for s in (s for s in steps if s.key in loading):
                got = (root.read_optional(s.path) or "").strip()
                if got != s.value:
                    raise _refuse(inst, s.key, f"the kernel did not take {s.value!r}: {s.path} reads {got[:40]!r} "
                                  "after the reload", "dmesg may say why; the module was given back")
                out.report[s.key] = {"before": s.now, "set": s.value, "reads": got, "reloaded": True}
                say(f"host {s.key}: {s.now} -> {got} for {inst} (its module reloaded)")
        for s in (s for s in steps if s.key not in loading):
            before = _online(root) if s.key == SMT else ()
            out.made.append(journal.record(root, {"op": OpKind.HOSTKNOB, "path": s.path, "before": s.now}, owner))
            root.write_text(s.path, s.value)
            got = root.read_optional(s.path) or ""
            if not _took(s.key, s.value, got, root.read_optional(ITLB)):
                raise _refuse(inst, s.key, f"the kernel did not take {s.value!r}: {s.path} reads {got[:40]!r} "
                              "after it was written", "dmesg may say why; the value was given back")
            entry: dict[str, Any] = {"before": s.now, "set": s.value, "reads": got}
            if s.key == SMT:
                out.smt_taken = tuple(c for c in before if c not in _online(root))
                entry["cpus_taken"] = format_cpulist(out.smt_taken)
            out.report[s.key] = entry
            say(f"host {s.key}: {s.now} -> {got} for {inst}" + (
                f" (CPUs {entry['cpus_taken'] or 'none'} taken offline)" if s.key == SMT else ""))
    except BaseException:
        give_back(root, out, lambda _line: None)
        raise
    return out


def check_placement(inst: str, applied: Applied, cpus: tuple[int, ...]) -> None:
    """The guest's planned CPUs (vCPUs and QEMU's) must all remain once SMT is off."""
    lost = sorted(set(cpus) & set(applied.smt_taken))
    if lost:
        raise HarnessError(f"instance {inst}: host.smt = off took CPUs {format_cpulist(tuple(lost))} offline, "
                           f"and the guest's placement uses them", "fewer vCPUs (guest.vcpus), or leave SMT on")


def give_back(root: HostRoot, applied: Applied | None, say: Say) -> list[str]:
    """Undo what `apply` set (newest first, through the one undo loop); returns the problems left."""
    seqs = {r["seq"] for r in applied.made} if applied is not None else set()
    return restore.undo(root, say, only=lambda rec: rec["seq"] in seqs) if seqs else []


def taken_by_smt_off(root: HostRoot) -> tuple[int, ...]:
    """The online CPUs SMT off would take away: every thread of a core but its first (a preview)."""
    out: set[int] = set()
    for cpu in _online(root):
        path = f"{CPU}/cpu{cpu}/topology/thread_siblings_list"
        text = root.read_optional(path)
        siblings = parse_cpulist(text, path) if text else (cpu,)
        out |= set(siblings) - {min(siblings, default=cpu)}
    return tuple(sorted(out & set(_online(root))))


def check_all(root: HostRoot, instances: tuple[Any, ...]) -> None:
    """Before a run changes anything: every instance's knobs and KVM modules checked on this host."""
    for n, inst in enumerate(instances):
        mods = getattr(inst, "kvm_modules", ())
        plan(root, inst.name, inst.host, files=tuple(kvm_module.check_all(mods, f"config.instance[{n}].kvm_modules")))


def preview(root: HostRoot, inst: str, knobs: dict[str, str | int], modules: tuple[str, ...] = ()) -> str:
    """What `inst` would set and load, checked on this host or snapshot, as one line ("" when nothing)."""
    parts = [f"kvm_modules {f.path} as {f.name} (vermagic {f.vermagic.split(' ', 1)[0]}, sha256 {f.sha256[:16]}..., "
             f"loaded in place of the stock {f.name} while no guest runs)"
             for f in kvm_module.check_all(modules, f"instance {inst}: kvm_modules")]
    for s in plan(root, inst, knobs):
        more = ""
        if s.key == SMT and s.value == "off" and s.now == "on":
            more = f", taking CPUs {format_cpulist(taken_by_smt_off(root)) or 'none'} offline"
        elif KNOBS[s.key].reload:
            more = f", set by reloading {', '.join(reload.modules_for(root, [s.key]))} while no guest runs"
        parts.append(f"{s.key} = {s.value} (reads {s.now} now{more})")
    return f"host knobs of {inst}, set before its guest boots and given back after it: " + "; ".join(parts) \
        if parts else ""


# the journal's op: a knob's file, and what it read before the harness wrote it ----------------------------
def _known_path(v: object) -> bool:
    return isinstance(v, str) and (v == SMT_CONTROL or bool(_PARAM.fullmatch(v)))


def _describe(rec: Record) -> str:
    return f"{rec['path']} back to {rec['before']}"


def _undo(root: HostRoot, rec: Record) -> list[str]:
    path, before = rec["path"], rec["before"]
    now = root.read_optional(path)
    if now is None:  # the module was unloaded: its parameters went with it, and come back at their defaults
        return []
    if now != before:
        root.write_text(path, before)
        now = root.read_optional(path)
    return [] if now == before else [f"{path} reads {str(now)[:40]!r}, not {before!r}, after writing it back"]


journal.register(OpKind.HOSTKNOB, Op(_describe, _undo, ("path", "before"), types={
    "path": _known_path, "before": lambda v: isinstance(v, str) and bool(_VALUE.fullmatch(v))}))
