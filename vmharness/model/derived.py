"""What a configuration implies beyond what it says: an attribution study's instances ([study]:
model/switches.py), the positive control's instance (`run --control`), the twin of every instance at each
pipelining depth (sweep.pipeline), the order instances take turns in (sweep.interleave = auto), and which
instances the points at the peak are for (the open-loop load, [explain]). Loading (model/config.py)
applies the first three, so that everything after it sees the instances that are measured; a resumed
run's configuration already holds them and is returned as it is."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

from vmharness.errors import HarnessError
from vmharness.model import switches as sw
from vmharness.model.sections import BenchConfig, RunConfig

C = TypeVar("C", bound=BenchConfig)  # with_pipelines() returns what it is given


def with_control(cfg: RunConfig, where: str = "control.cap") -> RunConfig:
    """`cfg` with its control instance (the first instance, vCPUs capped) appended, if it has a control
    and lacks it; a configuration that already holds it (a resumed run's) is returned as it is.
    `where`: the flag or key the cap came from, for errors."""
    c = cfg.control
    if not c.cap:
        return cfg
    base = cfg.instance[0]
    if base.vcpu_cap:
        raise HarnessError(f"{where}: the baseline {base.name} already caps its vCPUs (vcpu_cap = {base.vcpu_cap})",
                           "a control is the uncapped baseline made slower: drop vcpu_cap from the first instance")
    want = dataclasses.replace(base, name=c.name, vcpu_cap=c.cap)
    have = next((i for i in cfg.instance if i.name == c.name), None)
    if have is None:
        return dataclasses.replace(cfg, instance=(*cfg.instance, want))
    if have != want:
        raise HarnessError(f"{where}: an instance is already named {c.name!r}",
                           "rename that instance, or give the control another name (control.name)")
    return cfg


def study_variants(cfg: RunConfig) -> dict[str, list[str]]:
    """The study's instances after the reference, each by the switches it turns off, in order."""
    return _variants(cfg.study.switches, cfg.study.one_on)


def _variants(switches: Sequence[str], one_on: bool) -> dict[str, list[str]]:
    names = list(switches)
    out = {f"no-{s}": [s] for s in names}
    if len(names) > 1:  # with one switch, all off is its leave-one-out
        out[sw.ALL_OFF] = names
    if one_on:
        out.update({f"only-{s}": [o for o in names if o != s] for s in names})
    return out


def stand_ins(switches: Sequence[str], one_on: bool, gone: set[str], reference: str) -> dict[str, str]:
    """The study's instances that switches found to change nothing (`gone`: their leave-one-out was
    dropped at its boot) leave with nothing of their own to measure: all-off, or only-X, when the
    switches it turns off less those are none (it is the reference), one switch Y (it is no-Y), or the
    same as an instance's before it (only-X of a switch X gone is all-off again: X off or on, its guest
    is all-off's). Each such instance -> the one it stands for. Any other measures what no other
    instance does, and is kept."""
    out: dict[str, str] = {}
    first: dict[frozenset[str], str] = {}  # the switches left off -> the first instance that turns them off
    for name, off in _variants(switches, one_on).items():
        if name.startswith("no-"):
            continue
        left = frozenset(s for s in off if s not in gone)
        if not left:
            out[name] = reference
        elif len(left) == 1:
            out[name] = f"no-{next(iter(left))}"
        else:
            out[name] = first.setdefault(left, name)
    return {k: v for k, v in out.items() if k != v}


def with_study(cfg: RunConfig) -> RunConfig:
    """`cfg` with its study's instances after the reference (the first instance), if it has a study and
    lacks them; a configuration that already holds them (a resumed run's) is returned as it is."""
    names = cfg.study.switches
    _check_hypervisor_switches(cfg)
    if not names:
        return cfg
    sw.check_distinct(names, "study.switches")  # read so from a file; a manifest is checked again
    if sw.EVERY in names:
        every = dataclasses.replace(cfg.study, switches=tuple(sw.SWITCHES))
        return with_study(dataclasses.replace(cfg, study=every))
    ref = cfg.instance[0]
    sw.check_reference(ref.name, ref.cmdline, names)
    want = [dataclasses.replace(ref, name=name, cmdline=sw.cmdline(ref.cmdline, off),
                                qemu=cfg.study.qemu_off if sw.QEMU in off else ref.qemu,
                                kvm_modules=() if sw.KVM_MODULES in off else ref.kvm_modules)
            for name, off in study_variants(cfg).items()]
    have = {i.name: i for i in cfg.instance}
    if all(have.get(w.name) == w for w in want):
        return cfg
    if taken := sorted(w.name for w in want if w.name in have):
        raise HarnessError(f"study.switches: an instance is already named {taken[0]!r}",
                           "rename it: the study names its instances no-SWITCH, all-off and only-SWITCH")
    return dataclasses.replace(cfg, instance=(ref, *want, *cfg.instance[1:]))


def _check_hypervisor_switches(cfg: RunConfig) -> None:
    """The `qemu` switch needs the QEMU it turns to (study.qemu_off), one the reference does not run; the
    `kvm_modules` switch needs a reference that loads its own modules (off, the host's stock ones)."""
    st, ref = cfg.study, cfg.instance[0]
    if sw.KVM_MODULES in st.switches and not ref.kvm_modules:
        raise HarnessError(f"study.switches: kvm_modules needs the reference {ref.name} to load its own KVM modules "
                           "(its kvm_modules); with it off, the variants run on the host's stock ones",
                           'name the patched modules in the first instance: kvm_modules = ["/path/kvm.ko", ...]')
    if sw.QEMU not in st.switches:
        if st.qemu_off:
            raise HarnessError("study.qemu_off is set, but study.switches has no qemu",
                               'add "qemu" to study.switches')
        return
    if not st.qemu_off:
        raise HarnessError("study.switches: qemu needs study.qemu_off, the QEMU of the variants with it off",
                           'e.g. qemu_off = "/usr/bin/qemu-system-x86_64" (the stock one; the reference runs its own)')
    if st.qemu_off == (ref.qemu or cfg.guest.qemu):
        raise HarnessError(f"study.qemu_off {st.qemu_off[:200]}: the reference {ref.name} runs that QEMU already",
                           "name the patched QEMU in the first instance (qemu = ...), the stock one in qemu_off")


def twin_name(name: str, depth: int) -> str:
    return f"{name}-p{depth}"


def with_pipelines(cfg: C) -> C:
    """`cfg` with every instance at every depth of sweep.pipeline: the instance itself at the first, a
    twin NAME-pD (the instance, D requests per connection) at each other, appended in that order. A
    configuration that already holds them (a resumed run's) is returned as it is. The positive
    control is not twinned: its cost is known at the baseline's depth only."""
    depths = cfg.sweep.pipeline
    if depths == (1,):
        return cfg
    if not depths:
        raise HarnessError("sweep.pipeline is empty", "list the depths to measure at: [1] (the default), [1, 16]")
    if len(set(depths)) != len(depths):
        raise HarnessError(f"sweep.pipeline: {list(depths)} names a depth twice", "list each depth once: [1, 16]")
    control = cfg.control.name if isinstance(cfg, RunConfig) and cfg.control.cap else None
    names = {i.name for i in cfg.instance}
    originals = [i for i in cfg.instance if i.name == control or not any(
        i.name == twin_name(o.name, d) for o in cfg.instance for d in depths[1:] if o.name != i.name)]
    for i in originals:
        if i.pipeline not in (1, depths[0]) and i.name != control:
            raise HarnessError(f"instance {i.name}: pipeline = {i.pipeline}, and sweep.pipeline gives every "
                               "instance its depths", "set one: the instance's pipeline or sweep.pipeline")
    first = [i if i.name == control else dataclasses.replace(i, pipeline=depths[0]) for i in originals]
    twins = [dataclasses.replace(i, name=twin_name(i.name, d), pipeline=d)
             for d in depths[1:] for i in originals if i.name != control]
    want = (*first, *twins)
    if set(cfg.instance) == set(want):
        return cfg
    if taken := sorted(names & {t.name for t in twins}):
        raise HarnessError(f"sweep.pipeline: an instance is already named {taken[0]!r}",
                           "rename it: sweep.pipeline names the twin at each depth NAME-pDEPTH")
    return dataclasses.replace(cfg, instance=want)


def interleave(cfg: BenchConfig) -> str:
    if cfg.sweep.interleave != "auto":
        return cfg.sweep.interleave
    return "iteration" if isinstance(cfg, RunConfig) else "point"


def loaded(cfg: BenchConfig) -> list[str]:
    """The instances the open-loop load measures: all but a run's positive control (whose cap is a known
    cost at saturation, not a latency to compare) and pipelined ones (oha does not pipeline)."""
    control = cfg.control if isinstance(cfg, RunConfig) and cfg.control.cap else None
    return [i.name for i in cfg.instance if (control is None or i.name != control.name) and i.pipeline == 1]


def counts_syscalls(cfg: BenchConfig) -> bool:
    """A run whose [explain] asks for the server's system calls (bench/syscalls.py)."""
    return isinstance(cfg, RunConfig) and cfg.explain.syscalls


def profiles(cfg: BenchConfig) -> bool:
    """A run whose [explain] asks for a profile of the server's CPUs (bench/profile.py)."""
    return isinstance(cfg, RunConfig) and cfg.explain.profile


def explains(cfg: BenchConfig) -> bool:
    """A run with points at the baseline's peak that explain a cost (bench/explained.py)."""
    return counts_syscalls(cfg) or profiles(cfg)
