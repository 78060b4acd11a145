"""The run's CPU-bit check (host/inspect/cpubits.py), once a run, before anything is taken: in `run` and in
`run --print-xml`. QEMU is asked only when an instance names CPU features, and only once for all of them."""

from __future__ import annotations

from collections.abc import Callable

from vmharness import progress
from vmharness.host.inspect import cpubits, probes
from vmharness.model.sections import RunConfig
from vmharness.system.machine import for_uri
from vmharness.system.root import HostRoot


def uses_kvm(root: HostRoot, cfg: RunConfig) -> bool:
    """Whether the guests will run under KVM, as guest/instance.py decides it (on a host snapshot QEMU
    cannot be asked under its KVM: the host's vulnerability files answer instead)."""
    if not root.live or cfg.guest.accel == "tcg":
        return False
    if cfg.guest.accel == "kvm":
        return True
    kvm = (probes.load(root) or {}).get("kvm")
    return bool(kvm and kvm.get("usable"))


def preflight(root: HostRoot, cfg: RunConfig, say: progress.Say,
              ask: Callable[[bool], cpubits.Qemu] = cpubits.ask) -> None:
    """Refuses an instance's unknown CPU feature, or a `*-no` bit the host lacks that it does not claim."""
    named = [i for i in cfg.instance if i.cpu_features or i.claim_unmitigated]
    if not named:
        return
    if not for_uri(cfg.guest.uri).local:
        say(f"note: cpu_features not checked: the guests run at {cfg.guest.uri}, whose QEMU is not asked from here")
        return
    qemu = ask(uses_kvm(root, cfg))
    notes = [note for inst in named for note in cpubits.check(root, qemu, inst.name, inst.cpu_features,
                                                                inst.claim_unmitigated)]  # all refusals first
    if not root.live:
        notes.insert(0, f"cpu_features checked against this machine's {qemu.where}, and the `*-no` bits against "
                     "the host root's vulnerability files")
    for note in notes:
        say(f"note: {note}")
