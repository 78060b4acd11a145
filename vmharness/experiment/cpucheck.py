"""The run's check of its QEMU binaries and CPU bits (host/inspect/qemu_binary.py, host/inspect/cpubits.py),
once a run, before anything is taken: in `run` and in `run --print-xml`. Each QEMU a configuration names
is checked as a file and asked as a QEMU once, however many instances name it; the one libvirt finds is
asked only when an instance that runs it names CPU features. Each instance's features are checked
against the answer of the QEMU that will run its guest."""

from __future__ import annotations

from collections.abc import Callable

from vmharness import progress
from vmharness.errors import HarnessError
from vmharness.guest.session import qemu_of
from vmharness.host.inspect import cpubits, probes, qemu_binary
from vmharness.model.sections import RunConfig
from vmharness.rundir.store import RunDir
from vmharness.system.machine import for_uri
from vmharness.system.root import HostRoot

Inspect = Callable[[str, str, bool], qemu_binary.Binary]


def uses_kvm(root: HostRoot, cfg: RunConfig) -> bool:
    """Whether the guests will run under KVM, as guest/instance.py decides it (on a host snapshot QEMU
    cannot be asked under its KVM: the host's vulnerability files answer instead)."""
    if not root.live or cfg.guest.accel == "tcg":
        return False
    if cfg.guest.accel == "kvm":
        return True
    kvm = (probes.load(root) or {}).get("kvm")
    return bool(kvm and kvm.get("usable"))


def named_qemus(cfg: RunConfig) -> dict[str, str]:
    """Each QEMU binary the configuration names -> the key that first names it."""
    out: dict[str, str] = {}
    if cfg.study.qemu_off:  # the study's variants with the qemu switch off run it
        out[cfg.study.qemu_off] = "config.study.qemu_off"
    for n, inst in enumerate(cfg.instance):
        if path := qemu_of(cfg, inst):
            out.setdefault(path, f"config.instance[{n}].qemu" if inst.qemu else "config.guest.qemu")
    return out


def preflight(root: HostRoot, cfg: RunConfig, say: progress.Say,
              ask: Callable[[bool], cpubits.Qemu] = cpubits.ask,
              inspect: Inspect = qemu_binary.inspect) -> dict[str, qemu_binary.Binary]:
    """Refuses a QEMU that is not one (or not in a place only root can change), an instance's CPU feature
    its QEMU does not know, or a `*-no` bit the host lacks that it does not claim; returns the QEMU each
    instance names, by instance."""
    named = named_qemus(cfg)
    featured = [i for i in cfg.instance if i.cpu_features or i.claim_unmitigated]
    if not named and not featured:
        return {}
    if not for_uri(cfg.guest.uri).local:
        if named:
            raise HarnessError(f"{next(iter(named.values()))}: the guests run at {cfg.guest.uri}, and a QEMU is "
                               "checked where vmharness runs", "drop it, or run vmharness on the guests' host")
        say(f"note: cpu_features not checked: the guests run at {cfg.guest.uri}, whose QEMU is not asked from here")
        return {}
    kvm = uses_kvm(root, cfg)
    found = {path: inspect(path, where, kvm) for path, where in named.items()}
    answers: dict[str, cpubits.Qemu] = {path: b.cpu for path, b in found.items()}
    notes = []
    for inst in featured:  # all refusals before any note
        path = qemu_of(cfg, inst)
        if path not in answers:
            answers[path] = ask(kvm)
        notes += cpubits.check(root, answers[path], inst.name, inst.cpu_features, inst.claim_unmitigated)
    if not root.live and featured:
        whose = ", ".join(dict.fromkeys(answers[qemu_of(cfg, i)].where for i in featured))
        notes.insert(0, f"cpu_features checked against this machine's {whose}, and the `*-no` bits against "
                     "the host root's vulnerability files")
    for path, b in found.items():
        notes.insert(0, f"{named[path]}: QEMU {b.version} ({b.real}, sha256 {b.sha256[:16]}...)")
    for note in notes:
        say(f"note: {note}")
    return {inst.name: found[qemu_of(cfg, inst)] for inst in cfg.instance if qemu_of(cfg, inst)}


def record(run: RunDir, found: dict[str, qemu_binary.Binary]) -> None:
    """The QEMU each instance names, into the run's manifest (`qemu`: instance -> path, version, sha256);
    a resumed run whose QEMU file is no longer the one it began with is refused: measurements of two
    builds under one instance's name would not mix."""
    now = {name: b.to_json() for name, b in found.items()}
    before = run.manifest.get("qemu")
    if before is None:
        run.update_manifest(qemu=now)
        return
    if not isinstance(before, dict):
        raise HarnessError(f"the manifest of {run.path} holds a damaged qemu record", "start a new run")
    for name, b in now.items():
        old = before.get(name)
        if not isinstance(old, dict) or old.get("sha256") != b["sha256"]:
            raise HarnessError(f"instance {name}: its QEMU {b['path']} (sha256 {b['sha256'][:16]}...) is not the "
                               f"file this run began with", "start a new run: two builds' measurements do not mix")
