"""The server's system calls per request, from the counted points of `[explain] syscalls` (one per
instance and boot at the baseline's peak, bench/syscalls.py): each instance's calls per request over its
boots, the calls that make most of them, and its change against the baseline's paired by block. The
counter costs the server something, so those points' throughput is only set beside the same boots'
uncounted points at that count (the counter's own cost), never into the sweep's statistics.

A mitigation that makes each kernel entry dearer (page-table isolation) leaves the calls per request as
they were while the time per request grows: that is the explanation's shape. One that changes the calls
themselves shows here as a change."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness.analysis.change_json import change_json
from vmharness.analysis.loadcurve import damaged
from vmharness.bench import syscalls as counting
from vmharness.stats import LEVEL, Change, ratio_change

TOP = 4  # the calls named per instance
SAME_CALLS = 0.05  # a change in calls per request this small is no change in kind
EXPLAINS = 0.5  # the share of a throughput cost the guest's work per request must predict to explain it


@dataclass(frozen=True)
class Row:
    instance: str
    per_request: float  # the server's calls per request, the mean over its boots
    boots: int
    top: tuple[tuple[str, float], ...]  # the most frequent calls, per request
    change: Change | None  # against the baseline's, paired by block; None for the baseline
    cost: Change | None  # the counted points' throughput against the uncounted ones' in the same boots


@dataclass(frozen=True)
class View:
    connections: int
    rows: tuple[Row, ...]
    left_out: int  # counted points whose histogram overflowed (a lower bound, not a count)


def view(records: Iterable[dict[str, Any]], baseline: str, where: Path) -> View | None:
    """None for a run without counted points."""
    records = list(records)
    per: dict[str, dict[int, tuple[float, dict[str, float]]]] = {}
    rps: dict[str, dict[int, float]] = {}
    conns, left_out = None, 0
    for r in records:
        if r.get("kind") != "syscalls" or not r.get("ok"):
            continue
        try:
            found = counting.per_request(r)
            if found is None:
                left_out += 1
                continue
            name, it = str(r["instance"]), int(r["iteration"])
            conns = int(r["connections"])
            per.setdefault(name, {})[it] = found
            rps.setdefault(name, {})[it] = float(r["client"]["requests_per_s"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise damaged(where, "syscalls", r.get("key"), exc) from exc
    if conns is None:
        return None
    uncounted = _uncounted(records, conns, where)
    base = {it: v for it, (v, _) in per.get(baseline, {}).items()}
    rows = []
    for name in sorted(per, key=lambda n: (n != baseline, n)):
        boots = per[name]
        named: dict[str, list[float]] = {}
        for _, by_call in boots.values():
            for k, v in by_call.items():
                named.setdefault(k, []).append(v)
        top = sorted(((k, sum(v) / len(boots)) for k, v in named.items()), key=lambda kv: (-kv[1], kv[0]))[:TOP]
        mine = {it: v for it, (v, _) in boots.items()}
        change = None if name == baseline or not base else ratio_change(base, mine, "iteration", LEVEL)
        plain = {it: v for it, v in uncounted.get(name, {}).items() if it in rps[name]}
        cost = ratio_change(plain, {it: rps[name][it] for it in plain}, "boot", LEVEL) if plain else None
        rows.append(Row(name, statistics.fmean(mine.values()), len(boots), tuple(top), change, cost))
    return View(conns, tuple(rows), left_out)


def _uncounted(records: list[dict[str, Any]], conns: int, where: Path) -> dict[str, dict[int, float]]:
    """The sweep's successful points at `conns`, by instance and iteration (read as cells.py reads them)."""
    out: dict[str, dict[int, float]] = {}
    for r in records:
        if r.get("kind") == "measurement" and r.get("ok") and r.get("connections") == conns:
            try:
                out.setdefault(str(r["instance"]), {})[int(r["iteration"])] = float(r["client"]["requests_per_s"])
            except (KeyError, TypeError, ValueError) as exc:
                raise damaged(where, "measurement", r.get("key"), exc) from exc
    return out


def _interval(c: Change) -> str:
    return f" [{c.low:+.1%}, {c.high:+.1%}]" if c.bounded else ""


def _pct(c: Change | None) -> str:
    if c is None or not c.bounded:
        return ""
    return f" ({c.change:+.1%}{_interval(c)})"


def lines(v: View | None) -> list[str]:
    if v is None or not v.rows:
        return []
    first = next((r for r in v.rows if r.cost is not None and math.isfinite(r.cost.change)), None)
    said = (f"; counting changed {first.instance}'s throughput {first.cost.change:+.1%}"
            f"{_interval(first.cost)} against its uncounted points, and is kept out of every other figure"
            if first is not None and first.cost is not None else "")
    out = [f"system calls per request in the server at {v.connections} connections (counted in one extra "
           f"point per boot{said}):"]
    for r in v.rows:
        calls = ", ".join(f"{k} {x:.2f}" for k, x in r.top)
        out.append(f"  {r.instance}: {r.per_request:.2f}{_pct(r.change)} over {r.boots} boot(s): {calls}")
    if v.left_out:
        out.append(f"  {v.left_out} counted point(s) left out: the kernel's histogram overflowed (a lower bound), or "
                   f"its load served no more requests than its connections beyond the shorter load's before it")
    return out


def same_calls(c: Change) -> bool:
    """Whether an instance makes the baseline's calls per request: no change told from none, or one within
    SAME_CALLS (a slower server wakes for fewer requests at a time: the demo's pti and control make
    0.5-1.9% more). The one rule for the reasons below and the JSON report's `same_calls`."""
    return c.bounded and (c.low <= 0 <= c.high or abs(c.change) <= SAME_CALLS)


@dataclass(frozen=True)
class Reason:
    """What explains one variant's cost (reasons): the readings, and the verdict in a few words."""

    instance: str
    reading: str
    verdict: str


def reasons(v: View | None, work_us: Mapping[str, float | None], throughput: Mapping[str, float]) -> list[Reason]:
    """Each variant's cost read against the baseline's: its system calls per request, and its vCPUs' time
    per request less their time without load (saturation.work_per_request). A server bound by its vCPUs
    serves in inverse proportion to that time, so its rise alone predicts a throughput change; set
    beside the measured one (`throughput`: each variant's change at the peak), it says whether the
    guest's own work explains the cost (page-table isolation: the same calls, each dearer) or most of
    the cost lies outside that work (the positive control: a cap makes the guest wait, not work more).
    None for a variant without the readings or without a cost to explain."""
    if v is None or not v.rows or v.rows[0].change is not None:
        return []
    base, out = v.rows[0], []
    for r in v.rows[1:]:
        us, base_us, measured = work_us.get(r.instance), work_us.get(base.instance), throughput.get(r.instance)
        if r.change is None or not r.change.bounded or not us or not base_us or measured is None or measured >= 0:
            continue
        same = same_calls(r.change)
        predicted = base_us / us - 1
        calls = (f"the same system calls per request ({r.change.change:+.1%})" if same
                 else f"{r.change.change:+.1%} system calls per request")
        reading = (f"{calls}; its vCPUs' time per request, less their time without load, {us / base_us - 1:+.0%} "
                   f"({us:,.0f} against {base_us:,.0f} µs) predicts {predicted:+.0%} of the measured {measured:+.0%}")
        if predicted / measured >= EXPLAINS:
            verdict = "each call costs more, which explains the cost" if same else "the guest's added work explains it"
        else:
            verdict = "most of the cost lies outside the guest's work (a cap, a wait, contention)"
        out.append(Reason(r.instance, reading, verdict))
    return out


def why(found: list[Reason]) -> list[str]:
    return ["why, from the counted points:", *(f"  {r.instance}: {r.reading}: {r.verdict}" for r in found)] \
        if found else []


def to_json(v: View | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"connections": v.connections, "left_out": v.left_out, "instances": {
        r.instance: {"per_request": round(r.per_request, 4), "boots": r.boots,
                     "top": {k: round(x, 4) for k, x in r.top}, "change": change_json(r.change),
                     "same_calls": None if r.change is None else same_calls(r.change),
                     "counting_cost": change_json(r.cost)} for r in v.rows}}
