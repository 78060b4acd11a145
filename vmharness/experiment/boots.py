"""Which points each guest boot of `vmharness run` measures. The points are grouped by iteration and
by the instance whose guest boots, in the order the rotation put them; an instance that differs from
an earlier one only in what can be set without a boot (its vCPU cap, its pipelining depth) rides on
that one's boot instead of booting its own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from vmharness.bench import plan
from vmharness.model.sections import InstanceSection, RunConfig


@dataclass(frozen=True)
class Session:
    """One boot: an instance's points of one iteration (and those of the instances that ride on it)."""

    iteration: int
    instance: str  # the instance whose guest boots
    points: tuple[plan.Point, ...]


def rides(cfg: RunConfig) -> dict[str, str]:
    """Instances measured in another's boot: those whose guest and server are an earlier instance's,
    differing only in what is set without a boot: the vCPU cap (set live through libvirt: the
    positive control is the baseline capped) or the client's pipelining depth (sweep.pipeline's
    twins). In the same boot the two are paired within it, so the boot's own luck (under TCG, ±9%
    between boots of a capped guest here) does not blur their difference, and the run saves a boot
    per iteration. Instances alike in everything (an A/A comparison) still boot apart."""
    out: dict[str, str] = {}
    booted: list[InstanceSection] = []
    for i in cfg.instance:
        host = next((b for b in booted if _guest(b) == _guest(i) and (b.vcpu_cap, b.pipeline) != (i.vcpu_cap,
                                                                                                 i.pipeline)), None)
        if host is None:
            booted.append(i)
        else:
            out[i.name] = host.name
    return out


def _guest(i: InstanceSection) -> InstanceSection:
    """What a boot makes of an instance: all of it but its name and what changes without a boot."""
    return dataclasses.replace(i, name="", vcpu_cap=0, pipeline=1)


def sessions(todo: list[plan.Point], riding: dict[str, str] | None = None) -> list[Session]:
    """The points grouped by (iteration, the instance that boots), in the order they first appear: a
    riding instance's points go into its host's boot of the same iteration, before or after the
    host's own as the rotation put them, so neither is always measured on a warmer guest."""
    riding = riding or {}
    groups: dict[tuple[int, str], list[plan.Point]] = {}
    for p in todo:
        groups.setdefault((p.iteration, riding.get(p.instance, p.instance)), []).append(p)
    return [Session(it, name, tuple(pts)) for (it, name), pts in groups.items()]
