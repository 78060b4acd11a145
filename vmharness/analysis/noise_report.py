"""The report's noise, as lines and as JSON: each instance's variance split between blocks and its plan
(saturation.noise), then each shared host boot's three levels (hostnoise)."""

from __future__ import annotations

import math
from typing import Any

from vmharness.analysis import hostnoise
from vmharness.analysis.saturation import Analysis, Noise


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def instance_text(name: str, n: Noise, block: str) -> str:
    s = n.split
    out = (f"noise in {name}: {s.share:.0%} of the variance is between {block}s ({s.level:.0%}: {s.share_low:.0%}–"
           f"{s.share_high:.0%}); within a {block} ±{math.expm1(s.within):.1%} per measurement, between {block}s "
           f"±{math.expm1(s.between):.1%} ({s.blocks} {block}s × {s.counts} counts)")
    if n.plan is None:
        return out + f"; ±{n.target:.0%} at a point is out of reach of a plan"
    per = "measurement" if n.plan.repeats == 1 else "measurements"
    return (out + f"; for ±{n.target:.0%} at a point: {n.plan.blocks} {block}s × {n.plan.repeats} {per} of each "
            f"count (about {duration(n.plan.seconds)} for one count: boots and measurements)")


def lines(a: Analysis) -> list[str]:
    """Each instance's noise and its plan, then each shared host boot's three levels."""
    return ([instance_text(name, n, a.design.block) for name, n in sorted(a.noise.items())]
            + [hostnoise.text(h) for h in a.host_noise])


def _instance_json(n: Noise, block: str) -> dict[str, Any]:
    s = n.split
    return {"block": block, "blocks": s.blocks, "counts": s.counts, "between_sd_log": s.between,
            "within_sd_log": s.within, "between_share": s.share, "share_low": s.share_low,
            "share_high": s.share_high, "level": s.level, "target": n.target,
            "plan": None if n.plan is None else {"blocks": n.plan.blocks, "repeats": n.plan.repeats,
                                                 "seconds": n.plan.seconds}}


def to_json(a: Analysis) -> dict[str, Any]:
    return {"noise": {n: _instance_json(v, a.design.block) for n, v in a.noise.items()},
            "host_noise": [hostnoise.to_json(h) for h in a.host_noise]}
