"""The figures, PNG and SVG: throughput and server CPU against connections for every instance (seed
001's figure, with the iterations' t-intervals as error bars and the peak's bootstrap range shaded),
and latency percentiles at the baseline's saturation point, with their t-intervals."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from vmharness.analysis.saturation import LEVEL, PERCENTILES, Analysis
from vmharness.stats import mean_interval


def _save(fig: Figure, out: Path, stem: str) -> list[Path]:
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=120)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths


def throughput(a: Analysis, out: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    cpu = ax.twinx()
    for name, by_count in sorted(a.cells.items()):
        counts = sorted(by_count)
        ivs = [by_count[c].interval() for c in counts]
        means = [iv.mean / 1000 for iv in ivs]
        errs = [0.0 if math.isinf(iv.half) else iv.half / 1000 for iv in ivs]
        line = ax.errorbar(counts, means, yerr=errs, marker="o", capsize=3, label=f"{name} requests/s")
        busy = [statistics.fmean(by_count[c].server_busy) if by_count[c].server_busy else math.nan for c in counts]
        cpu.plot(counts, busy, linestyle="--", color=line[0].get_color(), alpha=0.6, label=f"{name} server CPU")
    if a.peak is not None:
        ax.axvline(a.peak, color="grey", linewidth=0.8, linestyle=":")
    p = a.peak_estimate
    if p is not None and p.bounded and p.at_low < p.at_high:
        ax.axvspan(p.at_low, p.at_high, color="grey", alpha=0.12, label=f"peak's {LEVEL:.0%} range")
    ax.set_xscale("log", base=2)
    counts_all = sorted({c for by_count in a.cells.values() for c in by_count})
    ax.set_xticks(counts_all, [str(c) for c in counts_all])
    ax.set_xlabel("connections")
    ax.set_ylabel("thousand requests/s")
    cpu.set_ylabel("server CPU busy (%)")
    cpu.set_ylim(0, 105)
    handles = ax.get_legend_handles_labels()[0] + cpu.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + cpu.get_legend_handles_labels()[1]
    ax.legend(handles, labels, loc="lower right", fontsize="small")
    ax.set_title("Throughput and server CPU" + (f" (baseline peak: {a.peak} connections)" if a.peak else ""))
    return _save(fig, out, "throughput")


def latency(a: Analysis, out: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    names = sorted(n for n, cells in a.cells.items() if a.peak in cells)
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        cell = a.cells[name][a.peak] if a.peak is not None else None
        if cell is None:
            continue
        ivs = [mean_interval(cell.latency[q], LEVEL) for q in PERCENTILES]
        values = [iv.mean / 1000 for iv in ivs]
        # the lower bar stops short of zero: the axis is logarithmic
        errs = [[0.0 if math.isinf(iv.half) else min(iv.half, 0.99 * iv.mean) / 1000 for iv in ivs],
                [0.0 if math.isinf(iv.half) else iv.half / 1000 for iv in ivs]]
        ax.bar([x + i * width for x in range(len(PERCENTILES))], values, width, yerr=errs, capsize=3, label=name)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(PERCENTILES))],
                  [f"p{q}" for q in PERCENTILES])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"Latency at the baseline's saturation point ({a.peak} connections)")
    ax.legend(fontsize="small")
    return _save(fig, out, "latency")
