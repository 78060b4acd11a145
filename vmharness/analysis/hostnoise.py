"""A run that went round host boots: for each host boot two or more instances shared, its noise at three
levels (host boot, guest boot, measurement; vmharness/noise_levels.py), which level a target width
needs repeated, and how narrow the host boots the run made can get. One instance per host boot cannot
tell its host boot's shift from its guest boot's, and a run in one host boot has no host level at all:
neither gets a line.

What a host switch costs (give back, kexec, the host's boot, the check on arrival) is read from the
records: from the last record before the first guest boot of a host boot to that guest boot's session
record, less the guest's own boot. A run with no measured switch plans with none: the plan says so."""

from __future__ import annotations

import calendar
import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vmharness import noise_levels
from vmharness.analysis.cells import Block, Cell
from vmharness.noise_levels import Levels, Plan
from vmharness.rundir.store import TIME_FORMAT


@dataclass(frozen=True)
class HostNoise:
    boot: str  # the host boot's name; "" the boot the run started in
    instances: tuple[str, ...]
    levels: Levels
    plan: Plan | None
    floor: float  # the narrowest ± on a point's mean that the run's own host boots allow
    target: float
    switch_seconds: float | None  # measured; None: no switch in the records


def host_boots(manifest: dict[str, Any]) -> dict[str, str]:
    """Each instance's host boot, where the run went round host boots (an instance names one that is not
    the run's own); else none: all its rounds were one host boot."""
    cfg = manifest.get("config")
    instances = cfg.get("instance") if isinstance(cfg, dict) else None
    if not isinstance(instances, list):
        return {}
    named = {i["name"]: i.get("host_boot", "") for i in instances
             if isinstance(i, dict) and isinstance(i.get("name"), str)}
    if not all(isinstance(b, str) for b in named.values()) or not any(named.values()):
        return {}
    return named


def view(manifest: dict[str, Any], table: dict[str, dict[int, Cell]], records: Iterable[dict[str, Any]],
         boot_seconds: float, measure_seconds: float, target: float) -> list[HostNoise]:
    boots = host_boots(manifest)
    by_boot: dict[str, list[str]] = {}
    for name, boot in boots.items():
        if name in table:
            by_boot.setdefault(boot, []).append(name)
    if not any(len(names) > 1 for names in by_boot.values()):
        return []  # a run in one host boot, or no host boot shared: no records read
    switch = switch_seconds(list(records), boots)
    out = []
    for boot, names in sorted(by_boot.items()):
        grid = _grid({n: table[n] for n in names})
        found = noise_levels.split(grid) if grid is not None else None
        if found is None:
            continue
        out.append(HostNoise(boot, tuple(names), found,
                             noise_levels.plan(found, target, switch or 0.0, boot_seconds, measure_seconds),
                             noise_levels.floor(found), target, switch))
    return out


def _grid(cells: dict[str, dict[int, Cell]]) -> np.ndarray | None:
    """Host boots (the blocks every instance measured every shared count in) x instances x counts."""
    counts = sorted(set.intersection(*(set(by_count) for by_count in cells.values())))
    values: dict[tuple[str, int], dict[Block, float]] = {
        (name, c): by_count[c].by_block(by_count[c].rps) for name, by_count in cells.items() for c in counts}
    if not values:
        return None
    blocks = sorted(set.intersection(*(set(v) for v in values.values())))
    if len(blocks) < 2 or len(counts) < 2 or len(cells) < 2:
        return None
    return np.array([[[values[(name, c)][b] for c in counts] for name in cells] for b in blocks], dtype=float)


def _seconds(stamp: object) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(stamp, TIME_FORMAT))) if isinstance(stamp, str) else None
    except ValueError:
        return None


def switch_seconds(records: list[dict[str, Any]], boots: dict[str, str]) -> float | None:
    """The mean time a host switch took, from the records (None: no switch in them)."""
    gaps = []
    last: float | None = None
    where: tuple[object, str] | None = None  # the (iteration, host boot) of the session before
    for r in records:
        at = _seconds(r.get("time"))
        if at is None:
            continue
        if r.get("kind") == "session" and r.get("ok") and r.get("instance") in boots:
            now = (r.get("iteration"), boots[str(r["instance"])])
            boot = r.get("boot_seconds")
            if where is not None and now != where and last is not None and isinstance(boot, int | float):
                gaps.append(max(0.0, at - last - float(boot)))
            where = now
        last = at
    return statistics.fmean(gaps) if gaps else None


def text(h: HostNoise) -> str:
    """The line the report gives a host boot's noise."""
    v = h.levels
    host, guest, own = v.shares()
    name = f"host boot {h.boot}" if h.boot else "the host boot the run started in"
    out = (f"noise across host boots ({name}, {v.host_boots} host boots × {len(h.instances)} instances × "
           f"{v.counts} counts): host boot ±{math.expm1(v.host):.1%}, guest boot ±{math.expm1(v.guest):.1%}, "
           f"measurement ±{math.expm1(v.within):.1%} ({host:.0%}, {guest:.0%} and {own:.0%} of a measurement's "
           f"variance; of a guest boot's mean's, the host boot's {v.boots.share:.0%}, {v.level:.0%}: "
           f"{v.boots.share_low:.0%}–{v.boots.share_high:.0%})")
    out += f"; {v.host_boots} host boots alone hold a point's mean to no better than ±{h.floor:.1%}"
    if h.plan is None:
        return out + f"; ±{h.target:.0%} at a point is out of reach of a plan"
    p = h.plan
    cost = "no switch measured" if h.switch_seconds is None else f"a switch {h.switch_seconds:.0f} s"
    return (out + f"; for ±{h.target:.0%} at a point: {p.host_boots} host boots, {_n(p.guest_boots, 'guest boot')} "
            f"in each, {_n(p.repeats, 'measurement')} of each count in each guest boot ({cost})")


def _n(n: int, what: str) -> str:
    return f"{n} {what}" + ("s" if n != 1 else "")


def to_json(h: HostNoise) -> dict[str, Any]:
    v = h.levels
    return {"host_boot": h.boot, "instances": list(h.instances), "host_boots": v.host_boots, "counts": v.counts,
            "host_sd_log": v.host, "guest_sd_log": v.guest, "within_sd_log": v.within,
            "shares": list(v.shares()), "host_share_of_boot_mean": v.boots.share,
            "share_low": v.boots.share_low, "share_high": v.boots.share_high, "level": v.level,
            "floor": h.floor, "target": h.target, "switch_seconds": h.switch_seconds,
            "plan": None if h.plan is None else {"host_boots": h.plan.host_boots, "guest_boots": h.plan.guest_boots,
                                                 "repeats": h.plan.repeats, "seconds": h.plan.seconds}}
