"""An analysis rendered: terminal text (warnings first), CSV (one row per instance and connection
count) and JSON (Markdown: markdown.py). Every interval names the method that made it."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Callable
from typing import Any

from vmharness import table
from vmharness.analysis import (
    events,
    exits,
    loadcurve,
    noise_report,
    profiles,
    sides,
    studies,
    summary,
    switch_why,
    syscalls,
    variants,
)
from vmharness.analysis.cells import PERCENTILES, Cell, vcpu_means
from vmharness.analysis.change_json import change_json, finite
from vmharness.analysis.headline import pct
from vmharness.analysis.intervals import TOO_FEW, log_interval
from vmharness.analysis.saturation import LEVEL, Analysis
from vmharness.rundir import histogram
from vmharness.stats import Interval, Peak
from vmharness.textsafe import csv_cell
from vmharness.textsafe import line as one_line

THIN_NOTE = f" (thin: under {histogram.MIN_BEYOND} requests beyond it in an iteration)"
THIN_FOOT = (f"* fewer than {histogram.MIN_BEYOND} requests lay beyond this percentile in an iteration: "
             "the sample cannot support it; measure longer")
PEAK_METHOD = ("bootstrap: where, resampling each point's iterations (percentile); how high, from the highest "
               "point's lower limit to the top's upper one, their factor from redrawing the whole curve")


def method_of(a: Analysis, name: str) -> str:
    return a.changes[name]["throughput"].method


def peak_text(a: Analysis) -> str:
    p = a.peak_estimate
    if p is None:
        return ""
    elsewhere = (f"; the others were measured at {a.peak} connections, where its first iteration peaked"
                 if a.peak is not None and a.peak != p.at else "")
    if not p.bounded:
        return f"saturation point {p.at} connections, {p.value:,.0f} requests/s (one iteration: no interval){elsewhere}"
    return (f"saturation point {p.at} connections ({p.level:.0%}: {p.at_low}–{p.at_high}), {p.value:,.0f} "
            f"requests/s ± {p.relative_half:.1%} ({p.level:.0%}: {p.low:,.0f}–{p.high:,.0f}; bootstrap, "
            f"{p.resamples:,} resamples){elsewhere}")


def _thin(c: Cell) -> list[str]:
    """The percentiles that some iteration of the cell cannot support: fewer than MIN_BEYOND requests
    lay beyond them (histogram.supported)."""
    return [q for q in PERCENTILES if not all(histogram.supported(q, n) for n in c.latency_n)]


def _latency_us(values: list[float]) -> float | None:
    """A percentile's mean over the iterations that have it (older records stop at p99.9)."""
    known = [v for v in values if math.isfinite(v)]
    return round(statistics.fmean(known), 1) if known else None


def rows_of(a: Analysis) -> list[dict[str, Any]]:
    rows = []
    for name, by_count in sorted(a.cells.items()):
        for count, c in sorted(by_count.items()):
            iv, geo = c.interval(), log_interval(c.values())  # the limits on the logarithms: never below 0
            rows.append({
                "instance": name, "connections": count, "iterations": len(c.values()),
                "requests_per_s": round(iv.mean, 1),
                "ci_low": round(geo.low, 1) if math.isfinite(geo.low) else None,
                "ci_high": round(geo.high, 1) if math.isfinite(geo.high) else None,
                **{f"p{q}_us": _latency_us(c.latency[q]) for q in PERCENTILES},
                "thin_percentiles": " ".join(f"p{q}" for q in _thin(c)) or None,
                "server_busy_percent": round(statistics.fmean(c.server_busy), 1) if c.server_busy else None,
                "server_steal_percent": round(statistics.fmean(c.sides.steal), 1) if c.sides.steal else None,
                "client_busy_percent": round(statistics.fmean(c.client_busy), 1) if c.client_busy else None,
                "client_thread_max_percent": None if (hot := c.sides.thread_max()) is None else round(hot, 1),
                "packets_per_request": round(statistics.fmean(p for p, _ in c.packets), 2) if c.packets else None,
                "vcpu_busy_percent": [round(v, 1) for v in vcpus] if (vcpus := vcpu_means(c)) else None,
                "vfio_interrupts_per_s": round(statistics.fmean(c.sides.vfio), 1) if c.sides.vfio else None,
                "errors": c.errors, "requests": c.requests,
            })
    return rows


def latency_cell(row: dict[str, Any], q: str) -> str:
    """A row's percentile as the tables print it: "*" marks one the sample cannot support (THIN_FOOT)."""
    value = row[f"p{q}_us"]
    if value is None:
        return "-"
    return f"{value:,.0f}" + ("*" if f"p{q}" in (row["thin_percentiles"] or "").split() else "")


def _interval(x: Interval | None) -> dict[str, Any] | None:
    if x is None:
        return None
    return {"mean": x.mean, "low": finite(x.low), "high": finite(x.high), "n": x.n, "level": x.level,
            "method": "Student t on the mean"}


def _peak_json(p: Peak | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"connections": p.at, "connections_low": p.at_low, "connections_high": p.at_high,
            "requests_per_s": p.value, "low": finite(p.low), "high": finite(p.high), "level": p.level,
            "resamples": p.resamples, "seed": p.seed, "method": PEAK_METHOD}


def to_json(a: Analysis) -> dict[str, Any]:
    return {"baseline": a.baseline, "peak_connections": a.peak, "peak_requests_per_s": _interval(a.peak_interval),
            "peak": _peak_json(a.peak_estimate), "plausible_peaks": a.plausible_peaks, "warnings": a.flags,
            "failed_points": a.failed, "block": a.design.block,
            "changes_at_peak": {n: {k: change_json(v) for k, v in ch.items()} for n, ch in a.changes.items()},
            **noise_report.to_json(a),
            "control": None if a.control is None else {
                "instance": a.control.instance, "cap_percent": a.control.cap, "expected": a.control.expected,
                "basis": a.control.basis,
                "recovered": a.control.recovered, "change": change_json(a.control.change),
                "baseline_vcpu_wait_percent": a.control.waited, "judged": a.control.judged,
                "verdict": variants.verdict(a.control)},
            "variants": {d.instance: {"differs": list(d.lines), "asked": d.asked, "seen": d.seen} for d in a.variants},
            "at_peak": a.at_peak, "vm_exits": exits.to_json(a.exits, a.exits_note),
            "kernel_events": events.to_json(a.events), "syscalls": syscalls.to_json(a.calls),
            **({} if a.profiles is None else {"profiles": profiles.to_json(a.profiles)}),  # a run without: as before
            "attribution": None if a.study is None else {**(studies.to_json(a.study) or {}),
                                                          "why": switch_why.to_json(a.switch_why)},
            "rows": rows_of(a), "load": None if a.load is None else loadcurve.to_json(a.load),
            "capacity": a.capacity, "summary": summary.build(a)}


def variant_lines(a: Analysis) -> list[str]:
    out = []
    for d in a.variants:
        out.append(f"{d.instance} against {a.baseline}: " + ("nothing differs" if not d.lines else d.lines[0]))
        out += [f"  {line}" for line in d.lines[1:]]
    return out


def calls_lines(a: Analysis) -> list[str]:
    return (syscalls.lines(a.calls) + profiles.lines(a.profiles) + syscalls.why(a.why)
            + switch_why.lines(a.switch_why))


def answer(a: Analysis) -> list[str]:
    """The answer in lines: the peak, each instance's changes there, the control, the noise, and what
    each variant's guest reported differently from the baseline's."""
    out = []
    if a.control is not None:
        out.append(variants.control_line(a.control))
    if a.peak is not None:
        out.append(f"baseline {a.baseline}: {peak_text(a)}")
        out += [w for f in summary.on_curve(a.flags) for w in warning("  WARNING: ", f, "  ", str)]
        if a.at_peak is not None and (said := sides.line(a.at_peak, a.peak)):
            out.append(said)
        out += exits.lines(a.exits, a.exits_note, a.peak) + events.lines(a.events, a.peak) + calls_lines(a)
        out += change_lines(a) + studies.lines(a.study, a.peak)
    return out + noise_report.lines(a) + variant_lines(a)


def change_lines(a: Analysis) -> list[str]:
    """Each instance's changes at the peak: throughput's and every percentile's, with its interval."""
    out: list[str] = []
    at = a.peak
    if at is None:
        return out
    for name, ch in sorted(a.changes.items()):
        out.append(f"{name} vs {a.baseline} at {at} connections ({method_of(a, name)}):")
        out.append(f"  throughput {pct(ch['throughput'])}")
        thin = {q for cell in (a.cells[a.baseline][at], a.cells[name][at]) for q in _thin(cell)}
        out += [f"  p{q} {pct(ch['p' + q])}" + (THIN_NOTE if q in thin else "") for q in PERCENTILES]
    return out


def points_table(a: Analysis) -> tuple[list[str], list[list[str]], list[str]]:
    """Every point's figures as the text and the page show them: header, rows and the footnote (the CSV and
    the JSON hold every column)."""
    rows = rows_of(a)
    header = ["INSTANCE", "CONNS", "N", "REQ/S", f"{LEVEL:.0%} CI", *(f"P{q} US" for q in PERCENTILES), "SERVER",
              "CLIENT", "ERRORS"]
    body = [[str(r["instance"]), str(r["connections"]), str(r["iterations"]), f"{r['requests_per_s']:,.0f}",
             TOO_FEW if r["ci_low"] is None else f"{r['ci_low']:,.0f}-{r['ci_high']:,.0f}",
             *(latency_cell(r, q) for q in PERCENTILES),
             _server_cell(r),
             "-" if r["client_busy_percent"] is None else f"{r['client_busy_percent']:.0f}%", str(r["errors"])]
            for r in rows]
    return header, body, [THIN_FOOT] if any(r["thin_percentiles"] for r in rows) else []


def answer_lines(s: dict[str, Any]) -> list[str]:
    """The summary (summary.py) as the terminal prints it first: the warnings that void or limit the
    answer, each with what to do, then the table under its caption, and what explains each cost; each
    line escaped (textsafe.line)."""
    out = [w for item in s["warnings"] for w in [*warning("WARNING: ", item["text"], ""), f"  do: {item['do']}"]]
    head = ["", *(c.upper() for c in s["columns"][1:])]
    out += [one_line(s["caption"]), *(table.render(head, summary.body(s), "  ") if s["rows"] else [])]
    return out + [one_line(f"  {r['name']}: why: {r['why']}") for r in s["rows"] if r.get("why")]


def short(a: Analysis, where: list[str]) -> str:
    """What the terminal prints by default, about a screen: the answer (answer_lines), how many more
    warnings the full text says, and `where` the rest is."""
    s = summary.build(a)
    n = len(s["notes"]) + len(s["on_curve"])
    more = [f"{n} more warning{'s' * (n != 1)} in the full text, beside what "
            + ("it concerns" if n == 1 else "they concern")] if n else []
    return "\n".join([*answer_lines(s), *map(one_line, [*more, *where])])


def text(a: Analysis) -> str:
    """The full text: the answer, the other warnings, the detail, every point; an open-loop point's
    warning beside the load's table."""
    s = summary.build(a)
    load = set(a.load.flags) if a.load is not None else set()
    header, body, foot = points_table(a)
    return "\n".join([*answer_lines(s),
                      *(w for f in s["notes"] if f not in load for w in warning("WARNING: ", f, "")),
                      *map(one_line, ["", *answer(a), "", *table.render(header, body), *foot]),
                      *_load_text(a, [f for f in s["notes"] if f in load])])


def warning(first: str, flag: str, indent: str, escape: Callable[[str], str] = one_line) -> list[str]:
    """A warning's lines, each escaped for its form (textsafe): the first after `first`, the rest (a
    guest console's tail) after `indent` and indented, so that no text in a warning starts a line of its
    own that could pass for another warning or a row."""
    head, *rest = flag.split("\n")
    return [first + escape(head), *(indent + ("" if r[:1].isspace() else "  ") + escape(r) for r in rest)]


def _server_cell(row: dict[str, Any]) -> str:
    """The server's busy share (without steal), and the steal beside it when there was any to speak of."""
    busy, steal = row["server_busy_percent"], row["server_steal_percent"]
    if busy is None:
        return "-"
    return f"{busy:.0f}%" + (f" st {steal:.0f}%" if steal is not None and steal >= 1 else "")


def _load_text(a: Analysis, flags: list[str]) -> list[str]:
    if a.load is None or not a.load.rows:
        return [w for f in flags for w in warning("WARNING: ", f, "")]
    head, body = loadcurve.table(a.load)
    thin = [loadcurve.THIN_FOOT] if any(r.thin(q) for r in a.load.rows for q in loadcurve.QS) else []
    return [*map(one_line, ["", loadcurve.title(a.load), *table.render(head, body), *thin]),
            *(w for f in flags for w in warning("WARNING: ", f, ""))]


def to_csv(a: Analysis) -> str:
    return csv_text(rows_of(a))


def csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: csv_cell(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows)
    return buf.getvalue()
