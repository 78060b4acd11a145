"""A change in words, as the report's detail writes it everywhere below the answer's table (summary.py)."""

from __future__ import annotations

import math

from vmharness.stats import Change


def pct(c: Change, short: bool = False) -> str:
    """A change with its interval, or what stands for one (no ratio, one iteration, none detected)."""
    if math.isnan(c.change):
        return f"n/a ({c.method})"
    if not c.bounded:
        return f"{c.change:+.1%} (one iteration: no interval)"
    out = f"{c.change:+.1%} [{c.low:+.1%}, {c.high:+.1%}]"
    if c.significant:
        return out
    if short:
        return f"{out} (none detected; ±{c.detectable:.1%} detectable)"
    return f"{out}: no change detected; this run could have seen ±{c.detectable:.1%}"
