"""The figures, PNG, SVG and PDF, in one style (STYLE): throughput and server CPU against connections
for every instance (seed 001's figure, with the iterations' t-intervals as error bars and the peak's
bootstrap range shaded), latency percentiles at the baseline's saturation point, with their
t-intervals, and there the whole latency distribution of each instance as a CCDF (the share of
requests slower than x, log-log, so that p99, p99.9 and p99.99 sit on evenly spaced lines): each
iteration's curve faint, which shows the spread a single curve would hide, and all iterations'
requests together bold; and latency against the open-loop load, per instance."""

from __future__ import annotations

import io
import math
import statistics
import warnings
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import numpy.typing as npt

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from vmharness.analysis.cells import PERCENTILES
from vmharness.analysis.loadcurve import LoadAnalysis
from vmharness.analysis.saturation import LEVEL, Analysis
from vmharness.rundir import histogram
from vmharness.rundir.histogram import Histogram
from vmharness.stats import mean_interval
from vmharness.system.owned import Folder
from vmharness.textsafe import line as one_line  # a name in a figure: an ESC is not a character of SVG

# A name is drawn as it is written, never read as mathtext: "$\\frac{$" in an instance's name would
# otherwise stop the drawing with a parse error. Every text that holds a name is made with
# parse_math=False (matplotlib's own switch, Text.set_parse_math): the legends (_legend), the
# attribution's switches, the load figure's axis label.


# One style for every figure, set here only: a paper's single column wide (3.5 in), type to match, and
# Okabe and Ito's colours, which readers with any colour-vision deficiency tell apart (their yellow last:
# it is faint on white)
OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
WIDTH = 3.5  # inches: a paper's single column
STYLE = {"figure.figsize": (WIDTH, 2.6), "font.size": 7, "axes.titlesize": 7, "axes.labelsize": 7,
         "legend.fontsize": 6, "xtick.labelsize": 6, "ytick.labelsize": 6, "lines.linewidth": 1.0,
         "lines.markersize": 3, "axes.prop_cycle": cycler(color=OKABE_ITO), "pdf.fonttype": 42}
plt.style.use(STYLE)
FORMATS = ("png", "svg", "pdf")  # the page shows the SVG, a paper takes the PDF


def _figure() -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(layout="constrained")
    return fig, ax


def save(fig: Figure, out: Folder, stem: str) -> list[Path]:
    """The figure in every format (FORMATS), each written into the report's folder as a whole new file."""
    paths = {}
    try:
        # laid out once, at the SVG's resolution (the page shows the SVG), and kept for the others: each
        # format laid the figure out again, a third of the report's time (in the nested rig, a minute)
        for ext in sorted(FORMATS, key=lambda e: e != "svg"):
            buf = io.BytesIO()
            with warnings.catch_warnings():  # a legend of long names leaves no room: drawn all the same
                warnings.filterwarnings("ignore", "constrained_layout not applied", UserWarning)
                fig.savefig(buf, format=ext, dpi=200 if ext == "png" else "figure")
            fig.set_layout_engine("none")
            paths[ext] = out.write(f"{stem}.{ext}", buf.getvalue())
    finally:
        plt.close(fig)
    return [paths[ext] for ext in FORMATS]


def _legend(ax: Axes, *args: Any, **kwargs: Any) -> None:
    """The axes' legend, its labels (names) drawn as text."""
    for text in ax.legend(*args, **kwargs).get_texts():
        text.set_parse_math(False)


def throughput(a: Analysis, out: Folder) -> list[Path]:
    fig, ax = _figure()
    cpu = ax.twinx()
    for name, by_count in sorted(a.cells.items()):
        counts = sorted(by_count)
        ivs = [by_count[c].interval() for c in counts]
        means = [iv.mean / 1000 for iv in ivs]
        errs = [0.0 if math.isinf(iv.half) else iv.half / 1000 for iv in ivs]
        line = ax.errorbar(counts, means, yerr=errs, marker="o", capsize=3, label=f"{one_line(name)} requests/s")
        busy = [statistics.fmean(by_count[c].server_busy) if by_count[c].server_busy else math.nan for c in counts]
        cpu.plot(counts, busy, linestyle="--", color=line[0].get_color(), alpha=0.6,
                 label=f"{one_line(name)} server CPU")
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
    ax.set_ylim(bottom=0)  # a drop is read as the share of the height it takes: the axis starts at zero
    cpu.set_ylabel("server CPU busy (%)")
    cpu.set_ylim(0, 105)
    handles = ax.get_legend_handles_labels()[0] + cpu.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + cpu.get_legend_handles_labels()[1]
    _legend(ax, handles, labels, loc="lower right", fontsize="small")
    ax.set_title("Throughput and server CPU" + (f" (baseline peak: {a.peak} connections)" if a.peak else ""))
    return save(fig, out, "throughput")


def latency(a: Analysis, out: Folder) -> list[Path]:
    fig, ax = _figure()
    names = sorted(n for n, cells in a.cells.items() if a.peak in cells)
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        cell = a.cells[name][a.peak] if a.peak is not None else None
        if cell is None:
            continue
        ivs = [mean_interval([v for v in cell.latency[q] if math.isfinite(v)] or [math.nan], LEVEL)
               for q in PERCENTILES]  # older records stop at p99.9: their p99.99 is NaN, not drawn
        values = [iv.mean / 1000 for iv in ivs]
        # the lower bar stops short of zero: the axis is logarithmic
        errs = [[0.0 if math.isinf(iv.half) else min(iv.half, 0.99 * iv.mean) / 1000 for iv in ivs],
                [0.0 if math.isinf(iv.half) else iv.half / 1000 for iv in ivs]]
        ax.bar([x + i * width for x in range(len(PERCENTILES))], values, width, yerr=errs, capsize=3,
               label=one_line(name))
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(PERCENTILES))],
                  [f"p{q}" for q in PERCENTILES])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"Latency at the baseline's saturation point ({a.peak} connections)")
    _legend(ax, fontsize="small")
    return save(fig, out, "latency")


def ccdf(a: Analysis, out: Folder) -> list[Path]:
    """The CCDF at the baseline's peak, for the instances whose records there hold histograms (none
    for a run written before they were kept: then no figure)."""
    at = a.peak
    shown = {name: [h for h in cells[at].histograms if h is not None and h.count]
             for name, cells in sorted(a.cells.items()) if at is not None and at in cells}
    shown = {name: hs for name, hs in shown.items() if hs}
    if not shown:
        return []
    fig, ax = _figure()
    lowest = 1.0
    for name, hists in shown.items():
        x, y = _steps(histogram.merge(hists))
        line = ax.step(x, y, where="pre", linewidth=1.8, label=f"{one_line(name)} ({len(hists)} iterations pooled)")[0]
        for h in hists:
            x, y = _steps(h)
            ax.step(x, y, where="pre", linewidth=0.6, alpha=0.35, color=line.get_color())
            lowest = min(lowest, float(y[-1]))
    for q in ("99", "99.9", "99.99"):
        share = 1 - float(q) / 100
        if share >= lowest:
            ax.axhline(share, color="grey", linewidth=0.6, linestyle=":")
            ax.annotate(f"p{q}", (1.0, share), xycoords=("axes fraction", "data"), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize="small", color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(lowest / 2, 1.5)
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("share of requests slower")
    ax.set_title(f"Latency distribution at the baseline's saturation point ({at} connections)")
    _legend(ax, fontsize="small", loc="lower left")
    return save(fig, out, "latency-ccdf")


def _steps(h: Histogram) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The CCDF as a staircase (drawn "pre": left of each latency, the share slower than the one
    before), in milliseconds. It ends at the slowest latency, with the share of requests there: a
    share of zero has no place on a log axis."""
    values, slower = h.slower()
    return values / 1000, np.concatenate([[1.0], slower[:-1]])


def latency_vs_load(la: LoadAnalysis, out: Folder) -> list[Path]:
    """p50 (dashed) and p99 (solid) against the load, as % of the baseline's peak, one colour per
    instance, with the iterations' 95% intervals (geometric) as error bars; a point whose achieved
    rate missed the requested one is drawn hollow."""
    fig, ax = _figure()
    names = list(dict.fromkeys(r.instance for r in la.rows))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, name in enumerate(names):
        mine = [r for r in la.rows if r.instance == name]
        for q, style in (("50", "--"), ("99", "-")):
            ivs = [r.latency[q] for r in mine]
            x = [r.percent + 0.6 * i for r in mine]  # the instances side by side, not on top of each other
            y = [iv.mean / 1000 for iv in ivs]
            # the geometric intervals are not symmetric (docs: analysis/loadcurve.py)
            errs = [[(iv.mean - iv.low) / 1000 if math.isfinite(iv.low) else 0.0 for iv in ivs],
                    [(iv.high - iv.mean) / 1000 if math.isfinite(iv.high) else 0.0 for iv in ivs]]
            colour = colours[i % len(colours)]
            ax.errorbar(x, y, yerr=errs, fmt=style, color=colour, capsize=3, label=f"{one_line(name)} p{q}")
            missed = [(p, v) for r, p, v in zip(mine, x, y, strict=True) if r.missed]
            if missed:
                ax.plot(*zip(*missed, strict=True), "o", mfc="white", color=colour)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.set_xlabel(f"load: % of {one_line(la.baseline)}'s peak ({la.peak:,.0f} req/s), open loop (oha)",
                  parse_math=False)
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency against load (hollow: the achieved rate missed the requested one by over 2%)")
    _legend(ax, fontsize="small", ncol=2)
    return save(fig, out, "latency-load")


def waterfall(a: Analysis, out: Folder) -> list[Path]:
    """An attribution study's throughput at the baseline's peak, from all off to all on: the two as whole
    bars, between them a bar a switch (its marginal cost, the largest first, labelled with its side), then
    the interaction, what their sum leaves unexplained. The host's switches are no step of it: no host
    boot turns them all off (their costs are in the study's lines and the summary). The axis starts at
    zero: a step is read as the share it takes."""
    steps = a.study.waterfall if a.study is not None else []
    if a.study is None or not steps:
        return []
    fig, ax = _figure()
    sides = a.study.sides  # each switch's bar names its side: the guest kernel's or the hypervisor's
    bars = [("all off", 0.0, steps[0][1]), *((f"{s} ({sides[s]})" if s in sides else s, x, y) for s, x, y in steps),
            ("all on", 0.0, steps[-1][2])]
    for x, (label, start, end) in enumerate(bars):
        whole = start == 0.0
        color = (OKABE_ITO[0] if whole else "grey" if label == "interaction" else OKABE_ITO[1] if end < start
                 else OKABE_ITO[2])
        ax.bar(x, (end - start) / 1000, bottom=start / 1000, color=color)
        ax.annotate(f"{end:,.0f}" if whole else f"{end / start - 1:+.1%}", (x, max(start, end) / 1000),
                    ha="center", va="bottom", fontsize="small")
    ax.set_xticks(range(len(bars)), [one_line(label) for label, _, _ in bars], rotation=30, ha="right",
                  parse_math=False)
    ax.set_ylim(0, max(max(s, e) for _, s, e in bars) / 1000 * 1.12)
    ax.set_ylabel("thousand requests/s (geometric mean over boots)")
    ax.set_title(f"From all mitigations off to all on, at {a.peak} connections")
    return save(fig, out, "attribution")
