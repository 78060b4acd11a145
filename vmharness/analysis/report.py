"""An analysis rendered: terminal text (warnings first), Markdown, CSV (one row per instance and
connection count) and JSON."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path
from typing import Any

from vmharness import table
from vmharness.analysis.saturation import LEVEL, PERCENTILES, Analysis
from vmharness.stats import Interval


def _pct(iv: Interval) -> str:
    if math.isinf(iv.low):
        return f"{iv.mean:+.1%} (one iteration: no interval)"
    return f"{iv.mean:+.1%} [{iv.low:+.1%}, {iv.high:+.1%}]"


def _rows(a: Analysis) -> list[dict[str, Any]]:
    rows = []
    for name, by_count in sorted(a.cells.items()):
        for count, c in sorted(by_count.items()):
            iv = c.interval()
            rows.append({
                "instance": name, "connections": count, "iterations": len(c.rps),
                "requests_per_s": round(iv.mean, 1),
                "ci_low": None if math.isinf(iv.low) else round(iv.low, 1),
                "ci_high": None if math.isinf(iv.high) else round(iv.high, 1),
                **{f"p{q}_us": round(statistics.fmean(c.latency[q]), 1) for q in PERCENTILES},
                "server_busy_percent": round(statistics.fmean(c.server_busy), 1) if c.server_busy else None,
                "client_busy_percent": round(statistics.fmean(c.client_busy), 1) if c.client_busy else None,
                "errors": c.errors, "requests": c.requests,
            })
    return rows


def to_json(a: Analysis) -> dict[str, Any]:
    def iv(x: Interval | None) -> dict[str, Any] | None:
        if x is None:
            return None
        return {"mean": x.mean, "low": None if math.isinf(x.low) else x.low,
                "high": None if math.isinf(x.high) else x.high, "n": x.n, "level": x.level,
                "method": "Student t (Welch for changes)"}

    return {"baseline": a.baseline, "peak_connections": a.peak, "peak_requests_per_s": iv(a.peak_interval),
            "plausible_peaks": a.plausible_peaks, "warnings": a.flags, "failed_points": a.failed,
            "changes_at_peak": {n: {k: iv(v) for k, v in ch.items()} for n, ch in a.changes.items()},
            "rows": _rows(a)}


def text(a: Analysis) -> str:
    out = [f"WARNING: {f}" for f in a.flags]
    if a.peak is not None and a.peak_interval is not None:
        p = a.peak_interval
        band = "" if math.isinf(p.low) else f" ({LEVEL:.0%} t-interval {p.low:,.0f} to {p.high:,.0f}, n={p.n})"
        out.append(f"baseline {a.baseline}: saturation point {a.peak} connections, {p.mean:,.0f} requests/s{band}")
        for name, ch in sorted(a.changes.items()):
            out.append(f"{name} vs {a.baseline} at {a.peak} connections: throughput {_pct(ch['throughput'])}; "
                       + ", ".join(f"p{q} {_pct(ch['p' + q])}" for q in PERCENTILES))
    rows = _rows(a)
    header = ["INSTANCE", "CONNS", "N", "REQ/S", f"{LEVEL:.0%} CI", "P50 US", "P99 US", "SERVER", "CLIENT", "ERRORS"]
    body = [[str(r["instance"]), str(r["connections"]), str(r["iterations"]), f"{r['requests_per_s']:,.0f}",
             "-" if r["ci_low"] is None else f"{r['ci_low']:,.0f}-{r['ci_high']:,.0f}",
             f"{r['p50_us']:,.0f}", f"{r['p99_us']:,.0f}",
             "-" if r["server_busy_percent"] is None else f"{r['server_busy_percent']:.0f}%",
             "-" if r["client_busy_percent"] is None else f"{r['client_busy_percent']:.0f}%", str(r["errors"])]
            for r in rows]
    return "\n".join([*out, "", *table.render(header, body)])


def markdown(a: Analysis) -> str:
    lines = [f"> **Warning:** {f}" for f in a.flags]
    if a.peak is not None:
        lines += ["", f"Saturation point of `{a.baseline}`: **{a.peak} connections**.", ""]
        if a.changes:
            lines += ["| instance | throughput | " + " | ".join(f"p{q}" for q in PERCENTILES) + " |",
                      "|---|---|" + "---|" * len(PERCENTILES)]
            for name, ch in sorted(a.changes.items()):
                lines.append(f"| {name} | {_pct(ch['throughput'])} | "
                             + " | ".join(_pct(ch["p" + q]) for q in PERCENTILES) + " |")
            lines.append("")
    rows = _rows(a)
    if rows:
        keys = list(rows[0])
        lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        lines += ["| " + " | ".join("" if r[k] is None else str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def to_csv(a: Analysis) -> str:
    rows = _rows(a)
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def publish(a: Analysis, out: Path, title: str) -> list[Path]:
    """Every form of the report in `out`: text, Markdown, CSV, JSON, the figures, one HTML page."""
    from vmharness.analysis import page, plots

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in (("report.txt", text(a) + "\n"), ("report.md", markdown(a)), ("report.csv", to_csv(a)),
                          ("report.json", json.dumps(to_json(a), indent=2, sort_keys=True) + "\n")):
        (out / name).write_text(content)
        written.append(out / name)
    figures = plots.throughput(a, out) + (plots.latency(a, out) if a.peak is not None else [])
    (out / "report.html").write_text(page.render(a, title, figures))
    return [*written, *figures, out / "report.html"]
