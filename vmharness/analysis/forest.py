"""The answer as one figure: every change of the summary's table (summary.py) with its interval, on one
axis, a row an instance or a switch: throughput's change and p99's, each a point and its interval.

The axis is the ratio against the reference on a log scale, labelled as the change it is (-50%, +100%):
the intervals are made on log ratios (stats.py), so a change and its inverse lie as far from none on
either side, and an interval of +531,359% does not squeeze every other into a dot. A change without an
interval (too few iterations) is drawn hollow, without a bar; one with no figure at all, not. It is
written with the other figures (plots.py: PNG, SVG and PDF in their one style, a paper's column wide),
and the page inlines its SVG first: nothing from a run folder reaches it but the names, drawn as text
(textsafe.line, never mathtext)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from vmharness.analysis.plots import OKABE_ITO, WIDTH, save
from vmharness.system.owned import Folder
from vmharness.textsafe import line as one_line

SERIES = (("throughput", "throughput", OKABE_ITO[0], "o"), ("p99", "p99 latency", OKABE_ITO[1], "s"))
TICKS = (0.01, 0.1, 0.25, 0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 2.0, 4.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6)


def _ratio(value: Any) -> float | None:
    """A change as a ratio (1 + change), or None where it cannot stand on a log axis."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= -1:
        return None
    return 1.0 + value


def _label(ratio: float, _pos: float = 0) -> str:
    change = (ratio - 1) * 100
    return "none" if abs(change) < 1e-9 else f"{change:+,.0f}%" if abs(change) >= 10 else f"{change:+.0f}%"


def _ticks(lo: float, hi: float) -> list[float]:
    """The labelled ratios: none, then outward each of TICKS in range that stands far enough from the last
    for its label (a seventh of the axis's decades)."""
    gap = math.log10(hi / lo) / 7
    kept = [1.0]
    for side in (sorted((t for t in TICKS if lo <= t < 1), reverse=True), sorted(t for t in TICKS if 1 < t <= hi)):
        last = 1.0
        for t in side:
            if abs(math.log10(t / last)) >= gap:
                kept.append(t)
                last = t
    return sorted(kept)


def draw(summary: dict[str, Any], out: Folder) -> list[Path]:
    """The forest plot of the summary's rows as forest.png, .svg and .pdf in `out`; none when no row has
    a change to draw."""
    rows = [r for r in summary["rows"] if any(r.get(k) and _ratio(r[k]["change"]) for k, *_ in SERIES)]
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(WIDTH, 0.32 * len(rows) + 0.95), layout="constrained")
    seen: list[float] = []
    labelled: set[str] = set()
    for i, (key, label, colour, marker) in enumerate(SERIES):
        offset = 0.15 - 0.3 * i
        for y, r in enumerate(reversed(rows)):
            c = r.get(key)
            mid = _ratio(c["change"]) if c else None
            if c is None or mid is None:
                continue
            low, high = _ratio(c["low"]), _ratio(c["high"])
            bounded = c["low"] is not None and low is not None and high is not None
            if c["low"] is not None and low is not None and high is not None:
                ax.plot([low, high], [y + offset] * 2, color=colour, linewidth=1.5)
                seen += [low, high]
            ax.plot([mid], [y + offset], marker=marker, color=colour, markersize=4,
                    mfc=colour if bounded else "white", linestyle="none",
                    label=None if key in labelled else label)
            labelled.add(key)
            seen.append(mid)
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    lo, hi = min(seen), max(seen)
    ax.set_xlim(min(lo, 0.9) / 1.3, max(hi, 1.1) * 1.3)
    ax.xaxis.set_major_locator(FixedLocator(_ticks(min(lo, 0.9) / 1.3, max(hi, 1.1) * 1.3)))
    ax.xaxis.set_major_formatter(FuncFormatter(_label))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yticks(range(len(rows)), [one_line(r["name"]) for r in reversed(rows)])
    for text in ax.get_yticklabels():
        text.set_parse_math(False)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"change against {one_line(summary['reference'])} ({summary['level']:.0%} intervals)\n"
                  "hollow: too few iterations for one", parse_math=False)
    fig.legend(loc="outside upper right", ncol=2)
    return save(fig, out, "forest")
