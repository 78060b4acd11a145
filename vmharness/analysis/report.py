"""An analysis rendered: terminal text (warnings first), Markdown, CSV (one row per instance and
connection count) and JSON. Every interval names the method that made it."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path
from typing import Any

from vmharness import table
from vmharness.analysis.saturation import LEVEL, PERCENTILES, Analysis, Noise
from vmharness.stats import Change, Interval, Peak

PEAK_METHOD = ("bootstrap: where, resampling each point's iterations (percentile); how high, Student-t draws of "
               "each point's mean (basic interval)")


def _none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _pct(c: Change, short: bool = False) -> str:
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


def _method(a: Analysis, name: str) -> str:
    return a.changes[name]["throughput"].method


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _peak(a: Analysis) -> str:
    p = a.peak_estimate
    if p is None:
        return ""
    if not p.bounded:
        return f"saturation point {p.at} connections, {p.value:,.0f} requests/s (one iteration: no interval)"
    return (f"saturation point {p.at} connections ({p.level:.0%}: {p.at_low}–{p.at_high}), {p.value:,.0f} "
            f"requests/s ± {p.relative_half:.1%} ({p.level:.0%}: {p.low:,.0f}–{p.high:,.0f}; bootstrap, "
            f"{p.resamples:,} resamples)")


def _noise(name: str, n: Noise, block: str) -> str:
    s = n.split
    out = (f"noise in {name}: {s.share:.0%} of the variance is between {block}s ({s.level:.0%}: {s.share_low:.0%}–"
           f"{s.share_high:.0%}); within a {block} ±{math.expm1(s.within):.1%} per measurement, between {block}s "
           f"±{math.expm1(s.between):.1%} ({s.blocks} {block}s × {s.counts} counts)")
    if n.plan is None:
        return out + f"; ±{n.target:.0%} at a point is out of reach of a plan"
    per = "measurement" if n.plan.repeats == 1 else "measurements"
    return (out + f"; for ±{n.target:.0%} at a point: {n.plan.blocks} {block}s × {n.plan.repeats} {per} of each "
            f"count (about {_duration(n.plan.seconds)} for one count: boots and measurements)")


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


def _interval(x: Interval | None) -> dict[str, Any] | None:
    if x is None:
        return None
    return {"mean": x.mean, "low": _none(x.low), "high": _none(x.high), "n": x.n, "level": x.level,
            "method": "Student t on the mean"}


def _change(c: Change) -> dict[str, Any]:
    return {"change": _none(c.change), "low": c.low, "high": _none(c.high), "significant": c.significant,
            "detectable": _none(c.detectable), "n": c.n, "level": c.level, "method": c.method}


def _peak_json(p: Peak | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"connections": p.at, "connections_low": p.at_low, "connections_high": p.at_high,
            "requests_per_s": p.value, "low": _none(p.low), "high": _none(p.high), "level": p.level,
            "resamples": p.resamples, "seed": p.seed, "method": PEAK_METHOD}


def _noise_json(n: Noise, block: str) -> dict[str, Any]:
    s = n.split
    return {"block": block, "blocks": s.blocks, "counts": s.counts, "between_sd_log": s.between,
            "within_sd_log": s.within, "between_share": s.share, "share_low": s.share_low,
            "share_high": s.share_high, "level": s.level, "target": n.target,
            "plan": None if n.plan is None else {"blocks": n.plan.blocks, "repeats": n.plan.repeats,
                                                 "seconds": n.plan.seconds}}


def to_json(a: Analysis) -> dict[str, Any]:
    return {"baseline": a.baseline, "peak_connections": a.peak, "peak_requests_per_s": _interval(a.peak_interval),
            "peak": _peak_json(a.peak_estimate), "plausible_peaks": a.plausible_peaks, "warnings": a.flags,
            "failed_points": a.failed, "block": a.design.block,
            "changes_at_peak": {n: {k: _change(v) for k, v in ch.items()} for n, ch in a.changes.items()},
            "noise": {n: _noise_json(v, a.design.block) for n, v in a.noise.items()},
            "rows": _rows(a)}


def answer(a: Analysis) -> list[str]:
    """The answer in lines: the peak, each instance's changes there, the noise."""
    out = []
    if a.peak is not None:
        out.append(f"baseline {a.baseline}: {_peak(a)}")
        for name, ch in sorted(a.changes.items()):
            out.append(f"{name} vs {a.baseline} at {a.peak} connections ({_method(a, name)}):")
            out.append(f"  throughput {_pct(ch['throughput'])}")
            out += [f"  p{q} {_pct(ch['p' + q])}" for q in PERCENTILES]
    out += [_noise(name, n, a.design.block) for name, n in sorted(a.noise.items())]
    return out


def text(a: Analysis) -> str:
    rows = _rows(a)
    header = ["INSTANCE", "CONNS", "N", "REQ/S", f"{LEVEL:.0%} CI", "P50 US", "P99 US", "SERVER", "CLIENT", "ERRORS"]
    body = [[str(r["instance"]), str(r["connections"]), str(r["iterations"]), f"{r['requests_per_s']:,.0f}",
             "-" if r["ci_low"] is None else f"{r['ci_low']:,.0f}-{r['ci_high']:,.0f}",
             f"{r['p50_us']:,.0f}", f"{r['p99_us']:,.0f}",
             "-" if r["server_busy_percent"] is None else f"{r['server_busy_percent']:.0f}%",
             "-" if r["client_busy_percent"] is None else f"{r['client_busy_percent']:.0f}%", str(r["errors"])]
            for r in rows]
    return "\n".join([*(f"WARNING: {f}" for f in a.flags), *answer(a), "", *table.render(header, body)])


def markdown(a: Analysis) -> str:
    lines = [f"> **Warning:** {f}" for f in a.flags]
    if a.peak is not None:
        lines += ["", f"Baseline `{a.baseline}`: **{_peak(a)}**.", ""]
        if a.changes:
            lines += ["| instance | method | throughput | " + " | ".join(f"p{q}" for q in PERCENTILES) + " |",
                      "|---|---|---|" + "---|" * len(PERCENTILES)]
            for name, ch in sorted(a.changes.items()):
                lines.append(f"| {name} | {_method(a, name)} | {_pct(ch['throughput'], True)} | "
                             + " | ".join(_pct(ch["p" + q], True) for q in PERCENTILES) + " |")
            lines.append("")
    if a.noise:
        lines += [f"- {_noise(name, n, a.design.block)}" for name, n in sorted(a.noise.items())] + [""]
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
