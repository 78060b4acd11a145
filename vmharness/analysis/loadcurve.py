"""Latency against load: the open-loop points (records of kind `load`, docs/load.md) read back, per
instance and percentage of the baseline's peak.

- **Achieved rate.** Its mean over the iterations, with a t-interval. A point is flagged when any
  iteration's achieved rate is more than MISS (2%) off the requested one: the generator did not
  hold the rate, or the server could not answer it (in the open loop, the two look alike).
- **Latency.** p50, p99 and p99.9 of each iteration's histogram, summed up over the iterations (the
  boots are the blocks, as for the sweep) as a geometric mean with a t-interval on the logarithms:
  a latency is positive and its spread between boots multiplicative (one boot's p99 ten times
  another's, under TCG), so an interval on the raw values would reach below zero (intervals.py: none
  with too few iterations). The iterations'
  histograms are merged, and a percentile that the merged count cannot support is marked thin.
- **Changes.** Every other instance's change in p50 and p99 against the baseline at the same
  percentage: a ratio paired by iteration (stats.ratio_change), like the sweep's.
- **Capacity** (any run, with or without an open-loop load). For each client's `capacity` record, a
  warning when the baseline's peak share on that client comes within CAPACITY_SHARE (80%) of what wrk
  generated there, or the highest requested rate within 80% of what oha did. A record with an error is
  a warning that the client was not measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness.analysis.intervals import log_interval, span
from vmharness.bench.openloop import MISS
from vmharness.errors import HarnessError
from vmharness.rundir import histogram
from vmharness.rundir.histogram import Histogram
from vmharness.rundir.record_check import load_target
from vmharness.stats import Change, Interval, mean_interval, ratio_change

CAPACITY_SHARE = 0.8
QS = ("50", "99", "99.9")  # the percentiles the curve shows
CHANGED = ("50", "99")  # those compared against the baseline
THIN_FOOT = ("* fewer than 10 requests lay beyond this percentile in all iterations together: the sample cannot "
             "support it")


@dataclass(frozen=True)
class Row:
    instance: str
    percent: int
    requested: float  # requests/s, all clients
    achieved: Interval  # requests/s over the iterations
    worst: float  # the largest |achieved/requested - 1| of an iteration
    latency: dict[str, Interval]  # percentile -> microseconds over the iterations
    per_iteration: dict[str, dict[int, float]]  # percentile -> iteration -> microseconds
    merged: Histogram  # every iteration's requests
    failed: int
    changes: dict[str, Change]  # "p50", "p99" -> against the baseline at this percentage

    @property
    def missed(self) -> bool:
        return self.worst > MISS + 1e-9  # exactly 2% off is not over it

    def thin(self, q: str) -> bool:
        return not histogram.supported(q, self.merged.count)


@dataclass(frozen=True)
class LoadAnalysis:
    baseline: str
    peak: float  # the target's requests/s
    connections: int
    rows: list[Row]
    flags: list[str]


def damaged(where: Path, kind: str, key: object, exc: Exception) -> HarnessError:
    return HarnessError(f"{where}: the {kind} record {key!r} is damaged ({type(exc).__name__}: {exc})",
                        "a run writes these records itself: was the file edited? remove the damaged line and "
                        "re-measure with --resume")


def analyse(records: Iterable[dict[str, Any]], baseline: str, where: Path) -> LoadAnalysis | None:
    """The load analysis of a run's records (`where`: the records file, for errors); None for a run
    with no open-loop load (an older one, or load.percents = [])."""
    records = list(records)
    target = load_target(records)
    if target is None:
        return None
    try:
        peak, conns = float(target["requests_per_s"]), int(target["connections"])
    except (KeyError, TypeError, ValueError) as exc:
        raise damaged(where, "load_target", target.get("instance"), exc) from exc
    points: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("kind") == "load":
            try:
                points.setdefault((str(r["instance"]), int(r["percent"])), []).append(r)
            except (KeyError, TypeError, ValueError) as exc:
                raise damaged(where, "load", r.get("key"), exc) from exc
    rows = [_row(name, pct, recs, where) for (name, pct), recs in sorted(points.items())]
    base = {r.percent: r for r in rows if r.instance == baseline}
    rows = [_with_changes(r, base.get(r.percent)) if r.instance != baseline else r for r in rows]
    return LoadAnalysis(baseline, peak, conns, rows, _row_flags(rows))


def _row(name: str, pct: int, recs: list[dict[str, Any]], where: Path) -> Row:
    ok = [r for r in recs if r.get("ok")]
    achieved: dict[int, float] = {}
    per: dict[str, dict[int, float]] = {q: {} for q in QS}
    hists: list[Histogram] = []
    requested = 0.0
    for r in ok:
        try:
            c, it = r["client"], int(r["iteration"])
            requested = float(r["rate"])
            achieved[it] = float(c["requests_per_s"])
            lat = histogram.from_record(c["latency_us"], int(c["requests"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise damaged(where, "load", r.get("key"), exc) from exc
        for q in QS:
            if math.isfinite(lat.percentiles[q]) and lat.percentiles[q] > 0:
                per[q][it] = lat.percentiles[q]
        if lat.histogram is not None:
            hists.append(lat.histogram)
    if not ok:
        requested = float(recs[0].get("rate") or 0.0)
    worst = max((abs(v / requested - 1) for v in achieved.values()), default=math.inf) if requested else math.inf
    nan = Interval(math.nan, math.nan, math.nan, 0, 0.95)
    return Row(name, pct, requested, mean_interval(list(achieved.values())) if achieved else nan, worst,
               {q: log_interval(list(v.values())) if v else nan for q, v in per.items()}, per,
               histogram.merge(hists), len(recs) - len(ok), {})


def _with_changes(row: Row, base: Row | None) -> Row:
    if base is None:
        return row
    changes = {f"p{q}": ratio_change(base.per_iteration[q], row.per_iteration[q]) for q in CHANGED}
    return Row(row.instance, row.percent, row.requested, row.achieved, row.worst, row.latency, row.per_iteration,
               row.merged, row.failed, changes)


def _row_flags(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        if r.failed:
            out.append(f"{r.instance} at {r.percent}% of the peak: {r.failed} open-loop point(s) failed")
        if r.missed and math.isfinite(r.worst):
            out.append(f"{r.instance} at {r.percent}% of the peak: the achieved rate was {r.worst:.1%} off the "
                       f"requested {r.requested:,.0f} req/s in an iteration (over {MISS:.0%}): the generator "
                       f"did not hold the rate or the server could not answer it; its latency is that of an "
                       f"overload, not of this load")
    return out


def capacity_flags(capacity: list[dict[str, Any]], peak: float, highest: float) -> list[str]:
    """Warnings on what each client could generate (its `capacity` records) against the load put on it:
    the baseline's peak (requests/s, from the sweep) and the highest open-loop rate, each shared
    evenly between the clients."""
    out = []
    share = 1 / max(1, len(capacity))
    for c in capacity:
        name = c.get("machine", "?")
        if c.get("error"):
            out.append(f"client {name}: its capacity was not measured ({c['error']})")
            continue
        closed, opened = c.get("closed_per_s"), c.get("open_per_s")
        if isinstance(closed, int | float) and closed > 0 and peak * share >= CAPACITY_SHARE * closed:
            out.append(f"client {name}: the baseline's peak on it, {peak * share:,.0f} req/s, is "
                       f"{peak * share / closed:.0%} of its capacity (wrk against nginx on itself: {closed:,.0f} "
                       f"req/s): the peak may be the client's, not the server's (seed 003)")
        if isinstance(opened, int | float) and opened > 0 and highest * share >= CAPACITY_SHARE * opened:
            out.append(f"client {name}: the highest open-loop rate on it, {highest * share:,.0f} req/s, is "
                       f"{highest * share / opened:.0%} of its capacity (oha against nginx on itself: "
                       f"{opened:,.0f} req/s)")
    return out


def _interval(x: Interval) -> dict[str, float | None]:
    def num(v: float) -> float | None:
        return v if math.isfinite(v) else None
    return {"mean": num(x.mean), "low": num(x.low), "high": num(x.high), "n": x.n}


def rows(la: LoadAnalysis) -> list[dict[str, Any]]:
    """One flat row per instance and percentage (CSV, Markdown, HTML)."""
    out = []
    for r in la.rows:
        row: dict[str, Any] = {"instance": r.instance, "percent_of_peak": r.percent,
                               "requested_per_s": round(r.requested, 1),
                               "achieved_per_s": None if math.isnan(r.achieved.mean) else round(r.achieved.mean, 1),
                               "worst_rate_error": None if math.isinf(r.worst) else round(r.worst, 4),
                               "rate_missed": r.missed, "iterations": r.achieved.n, "failed": r.failed}
        for q in QS:
            x = r.latency[q]
            row[f"p{q}_us"] = None if math.isnan(x.mean) else round(x.mean)
            row[f"p{q}_low_us"] = None if not math.isfinite(x.low) else round(x.low)
            row[f"p{q}_high_us"] = None if not math.isfinite(x.high) else round(x.high)
            row[f"p{q}_thin"] = r.thin(q)
        for q in CHANGED:  # the baseline's own rows too, empty, so that every row has the same keys
            c = r.changes.get(f"p{q}")
            row[f"p{q}_change"] = None if c is None or math.isnan(c.change) else round(c.change, 4)
            row[f"p{q}_change_low"] = round(c.low, 4) if c is not None and math.isfinite(c.low) else None
            row[f"p{q}_change_high"] = round(c.high, 4) if c is not None and math.isfinite(c.high) else None
        out.append(row)
    return out


def to_json(la: LoadAnalysis) -> dict[str, Any]:
    return {"baseline": la.baseline, "peak_requests_per_s": la.peak, "connections": la.connections,
            "miss_threshold": MISS, "warnings": la.flags,
            "points": [{**row, "achieved": _interval(r.achieved),
                        "latency_us": {q: _interval(r.latency[q]) for q in QS},
                        "changes": {k: {"change": c.change, "low": c.low if math.isfinite(c.low) else None,
                                        "high": c.high if math.isfinite(c.high) else None, "method": c.method}
                                    for k, c in r.changes.items()}}
                       for r, row in zip(la.rows, rows(la), strict=True)]}


def _us(x: Interval, thin: bool) -> str:
    if math.isnan(x.mean):
        return "-"
    given = f" [{span(x)}]" if x.n else ""  # a p99.9 is shown without one
    return f"{x.mean:,.0f}{given}{'*' if thin else ''}"


def _change(c: Change | None) -> str:
    if c is None or math.isnan(c.change):
        return "-"
    if not c.bounded:
        return f"{c.change:+.0%}"
    return f"{c.change:+.0%} [{c.low:+.0%}, {c.high:+.0%}]"


def table(la: LoadAnalysis) -> tuple[list[str], list[list[str]]]:
    """The text table: header and rows."""
    head = ["INSTANCE", "% PEAK", "REQUESTED", "ACHIEVED", "P50 US (95% CI)", "P99 US (95% CI)", "P99.9 US",
            "P99 VS BASE"]
    body = [[r.instance, f"{r.percent}%", f"{r.requested:,.0f}",
             "-" if math.isnan(r.achieved.mean) else f"{r.achieved.mean:,.0f}{' !' if r.missed else ''}",
             _us(r.latency["50"], r.thin("50")), _us(r.latency["99"], r.thin("99")),
             _us(Interval(r.latency["99.9"].mean, math.nan, math.nan, 0, 0.95), r.thin("99.9")),
             _change(r.changes.get("p99"))] for r in la.rows]
    return head, body


def title(la: LoadAnalysis) -> str:
    return (f"LATENCY AGAINST LOAD: oha at fixed rates, as % of {la.baseline}'s peak of {la.peak:,.0f} req/s "
            f"({la.connections} connections); ! the achieved rate missed the requested one by over {MISS:.0%}")
