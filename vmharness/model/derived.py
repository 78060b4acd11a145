"""What a configuration implies beyond what it says: the positive control's instance (`run --control`),
the twin of every instance at each pipelining depth (sweep.pipeline) and the order instances take turns
in (sweep.interleave = auto). Loading (model/config.py) applies the first two, so that everything after
it sees the instances that are measured; a resumed run's configuration already holds them and is
returned as it is."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from vmharness.errors import HarnessError
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
