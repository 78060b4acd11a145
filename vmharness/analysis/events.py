"""Why a variant costs, in the kernel's own counts: per request at the baseline's peak, the server
machine's context switches, page faults, interrupts (TLB shootdowns among them) and softirqs by kind,
each instance's against the baseline's as a paired ratio. They come from the sampler's stream
(/proc/stat's ctxt, /proc/vmstat's pgfault, /proc/interrupts, /proc/softirqs), differenced over the
point's window
(vmharness/rundir/sample_summary.py), so reading them costs the measurement nothing more. What the guest's
kernel does each second without load (an idle record's, taken in each baseline boot of a run with a
control) is left out: per request it would grow as a variant's throughput falls. A mitigation
that adds work per request in the kernel shows here: page-table isolation's cost follows the entries
and exits (and the switches and interrupts among them), a TLB flush mitigation shows as shootdowns."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from vmharness.analysis.cells import Cell, block_means
from vmharness.analysis.change_json import change_json
from vmharness.stats import LEVEL, Change, ratio_change


@dataclass(frozen=True)
class View:
    instance: str
    means: dict[str, float]  # per request, over the iterations that have it
    iterations: int
    changes: dict[str, Change]  # against the baseline, paired by block (none for the baseline itself)
    idle: dict[str, float]  # each second without load, left out of `means` ({}: no idle reading)
    # events some point had no more of than the idle reading, with how many: no figure for the instance
    under_idle: dict[str, int]
    points: int  # the points sampled


def views(table: dict[str, dict[int, Cell]], peak: int, baseline: str, block: str) -> list[View]:
    """Each instance measured at `peak` whose server was sampled, the baseline first."""
    base = table.get(baseline, {}).get(peak)
    out = []
    for name in sorted(table, key=lambda n: (n != baseline, n)):
        cell = table[name].get(peak)
        if cell is None or not cell.events:
            continue
        # an event one point could not tell from the background is left out of every point of the
        # instance: kept in the others alone, its mean would rest on the points that happened to read more
        names = sorted({k for _, row in cell.events for k in row} - set(cell.events_under_idle))
        means = {k: statistics.fmean(row[k] for _, row in cell.events if k in row) for k in names}
        changes = {} if name == baseline or base is None else {
            k: ratio_change(_by_block(base, k), _by_block(cell, k), block, LEVEL) for k in names
            if _by_block(base, k) and k not in base.events_under_idle}
        out.append(View(name, means, len({b for b, _ in cell.events}), changes, cell.idle_events,  # blocks
                        dict(sorted(cell.events_under_idle.items())), len(cell.events)))
    return out


def _by_block(cell: Cell, key: str) -> dict[Any, float]:
    return block_means((b, row[key]) for b, row in cell.events if key in row)


SHOWN = ("context switches", "page faults", "interrupts", "TLB shootdowns", "softirqs")


TOO_WIDE = 10.0  # an interval whose ends lie more than this factor apart tells nothing of the change


def figure(value: float, change: Change | None) -> str:
    """A count per request, with its change against the baseline and that change's interval if it has one
    (the text's lines and the page's counters table). A count of a few events a point (page faults in a
    guest whose pages are all mapped) varies by whole multiples between boots: its interval spans more
    than TOO_WIDE times (once -100% to +538877295527%), which is said in words, not printed."""
    text = f"{value:.3g}"
    if change is not None and change.bounded:
        if change.low <= -1 or (1 + change.high) / (1 + change.low) > TOO_WIDE:
            return text + f" ({change.change:+.1%}, its interval more than {TOO_WIDE:g}-fold wide: too few to compare)"
        text += f" ({change.change:+.1%} [{change.low:+.1%}, {change.high:+.1%}])"
    return text


def _figure(v: View, key: str) -> str:
    return f"{key} {figure(v.means[key], v.changes.get(key))}"


def lines(found: list[View], peak: int) -> list[str]:
    if not found:
        return []
    paired = ", each against the baseline paired by block" if any(v.changes for v in found) else ""
    less = ("less what its kernel does each second without load" if all(v.idle for v in found) else
            "with what its kernel does without load (no idle reading: a run with [control] takes one)")
    out = [f"kernel events per request on the server at the peak ({peak} connections), {less}{paired}:"]
    for v in found:
        kinds = sorted((k for k in v.means if k.startswith("softirq ")), key=lambda k: -v.means[k])[:3]
        shown = [_figure(v, k) for k in SHOWN if k in v.means]
        if kinds:
            lead = "of which " if "softirqs" in v.means else "softirqs by kind: "
            shown.append(lead + ", ".join(f"{k.removeprefix('softirq ')} {v.means[k]:.3g}" for k in kinds))
        if shown:
            out.append(f"  {v.instance}: {'; '.join(shown)} over {v.iterations} iteration(s)")
        if v.under_idle:
            out.append(f"  {v.instance}: no figure for {_under(v)}: no more each second than without load, so "
                       "not told from the background (a vCPU that ran less than in the idle reading: capped, "
                       "or held off a loaded host's CPUs)")
    return out


def _under(v: View) -> str:
    """The events of `v` that some point could not tell from the background, each with how many points."""
    named = [f"{k} (in {n} of {v.points} point(s))" for k, n in v.under_idle.items() if not k.startswith("softirq ")]
    kinds = [k.removeprefix("softirq ") for k in v.under_idle if k.startswith("softirq ")]
    return ", ".join(named + ([f"softirqs of kind {', '.join(kinds)}"] if kinds else []))


def to_json(found: list[View]) -> dict[str, Any]:
    return {v.instance: {"per_request": {k: round(x, 5) for k, x in v.means.items()}, "iterations": v.iterations,
                         "idle_per_s_left_out": {k: round(x, 3) for k, x in v.idle.items()},
                         "under_idle": v.under_idle, "points": v.points,
                         "changes": {k: change_json(c) for k, c in v.changes.items()}} for v in found}
