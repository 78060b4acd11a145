"""One self-contained HTML page: the answer's table (summary.py) with the warnings that void or limit it
above and the others below, the answer with the method of
every interval, the figures inline (SVG), the profiles' growers and flame graphs, the server's counters
per request, and the text report's own tables (a latency percentile too far in the tail for its sample
marked as there): none wider than the page, every column in the CSV and the JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from vmharness import userfile
from vmharness.analysis import events, flame, loadcurve, profiles, report, summary, switch_why
from vmharness.analysis.saturation import Analysis
from vmharness.stats import Change
from vmharness.textsafe import html as _text
from vmharness.textsafe import json_text

STYLE = """body{font:15px/1.45 system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
p{white-space:pre-wrap}.warn{background:#fff3cd;border-left:4px solid #e0a800;padding:.4em .8em;margin:.3em 0}
.answer{background:#e7f1ff;border-left:4px solid #0b5ed7;padding:.2em .8em;margin:.6em 0}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f2f2f2}figure{margin:1.5em 0}svg{max-width:100%;height:auto}"""

MAX_FIGURE = 64 << 20  # bytes: an SVG figure the report just wrote, read back into the page

ALL_COLUMNS = ("every column of every point, and each interval's limits: report.csv, report-load.csv and "
               "report.json beside this page")
COUNTERS = ("system calls counted in points of their own ([explain] syscalls); kernel events from the guest's "
            "sampler, less what its kernel does each second without load; each change against the baseline "
            "paired by block, with its 95% interval")

LATENCY_METHOD = ("latency: percentiles (inverted CDF) of each iteration's histogram, every client's per-microsecond "
                  "counts summed; a change in one is a ratio like throughput's")


def render(a: Analysis, title: str, figures: list[Path], flames: list[Path] | None = None) -> str:
    data = report.to_json(a)
    warnings, lead = answer(data["summary"])
    detail = "".join(f"<p>{_text(line)}</p>" for line in report.answer(a))
    methods = sorted({c.method for ch in a.changes.values() for c in ch.values()})
    method = ("<h2>Method</h2><ul>" + "".join(f"<li>{_text(m)}</li>" for m in
                                           [f"the peak: {report.PEAK_METHOD}", *(f"changes: {m}" for m in methods),
                                            LATENCY_METHOD])
              + "</ul><p>docs/statistics.md explains each.</p>") if a.peak is not None else ""
    head, body, foot = report.points_table(a)
    points = _table(head, body) + "".join(f"<p>{_text(f)}</p>" for f in foot)
    load_table = (f"<h2>Latency against load</h2><p>{_text(loadcurve.title(a.load))}</p>"
                  f"{_table(*loadcurve.table(a.load))}"
                  if a.load is not None and a.load.rows else "")
    svgs = "".join(f"<figure>{userfile.text(f, MAX_FIGURE).split('?>', 1)[-1]}</figure>"
                   for f in figures if f.suffix == ".svg")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_text(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{_text(title)}</h1>{warnings}{lead}{detail}{svgs}"
            f"{_profiles(a.profiles, flames or [], a.switch_why)}{method}"
            f"{_counters(a)}<h2>All points</h2>{points}{load_table}<p>{ALL_COLUMNS}</p>"
            f"<script type=application/json id=data>{_text(json_text(data, None, sort=False))}</script>"
            "</body></html>\n")


def answer(s: dict[str, Any]) -> tuple[str, str]:
    """The summary (summary.py) as the page begins: the warnings that void or limit the answer, each with
    what to do; then the table under its caption, what explains each cost, and the other warnings."""
    warnings = "".join(f'<div class="warn">{_text(w["text"])}<br><i>Do:</i> {_text(w["do"])}</div>'
                       for w in s["warnings"])
    why = "".join(f"<li>{_text(r['name'])}: why: {_text(r['why'])}</li>" for r in s["rows"] if r.get("why"))
    lead = (f'<div class="answer"><p><b>{_text(s["caption"])}</b></p>'
            + (_table(s["columns"], summary.body(s)) if s["rows"] else "")
            + (f"<ul>{why}</ul>" if why else "") + "</div>"
            + "".join(f'<div class="warn">{_text(w)}</div>' for w in s["notes"]))
    return warnings, lead


class _Grown(NamedTuple):
    """One profile read against another on the page: a variant against the baseline, or a study's
    reference against a switch's leave-one-out."""
    name: str
    base: str
    grew: tuple[profiles.Grower, ...]
    svg: str  # its flame graph's file name, drawn or not
    title: str


def _profiles(v: profiles.View | None, flames: list[Path], switches: tuple[switch_why.Why, ...]) -> str:
    """Each variant's growers as a table, and its differential flame graph (flame.py) in an <img>: the
    SVG's own JavaScript never runs there, and it is not inlined; then each explained switch's in a study."""
    if v is None or not (v.growers or any(w.grew is not None for w in switches)):
        return ""
    drawn = {f.name for f in flames}
    out = [f"<h2>What grew per request in the profiles</h2><p>{_text(profiles.TEST)}</p>"]
    shown = [_Grown(name, v.baseline, grew, flame.file_name(name), name) for name, grew in v.growers.items()]
    shown += [_Grown(w.reference, w.against, w.grew, flame.switch_file(w.switch), f"{w.switch}: {w.reference}")
              for w in switches if w.grew is not None]
    for name, base, grew, svg, title in shown:
        out.append(f"<h3>{_text(title)} against {_text(base)}</h3>")
        if grew:
            out.append(f"<table><tr><th>function</th><th>µs/request, {_text(base)}</th><th>{_text(name)}</th>"
                       f"<th>share, {_text(base)}</th><th>{_text(name)}</th><th>p</th></tr>" + "".join(
                           f"<tr><td>{_text(g.name)}</td><td>{g.us[0]:.3f}</td><td>{g.us[1]:.3f}</td>"
                           f"<td>{g.share[0]:.1%}</td><td>{g.share[1]:.1%}</td><td>{g.p:.1e}</td></tr>" for g in grew)
                       + "</table>")
        else:
            out.append("<p>nothing grew</p>")
        if svg in drawn:
            out.append(f'<figure><img src="{_text(svg)}" alt="differential flame graph of {_text(title)}" '
                       f'style="max-width:100%"><figcaption>{_text(name)} against {_text(base)}, per '
                       "request (the server's work: the idle loop and the guest's other processes left out): widths "
                       "are its time, red where a function's time per request grew, blue where it shrank; open the "
                       "SVG alone to search and zoom</figcaption>"
                       "</figure>")
    return "".join(out)


def _table(head: list[str], body: list[list[str]]) -> str:
    """A table as the text report prints it: its columns, each cell's text (no wider than the page)."""
    return ("<table><tr>" + "".join(f"<th>{_text(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_text(c)}</td>" for c in row) + "</tr>" for row in body) + "</table>")


def _counters(a: Analysis) -> str:
    """The server's counters per request at the peak, one row an instance: its system calls (the counted
    points) and its kernel events, each with its change against the baseline (events.py, syscalls.py)."""
    calls = {r.instance: r for r in a.calls.rows} if a.calls is not None else {}
    names = [v.instance for v in a.events] or list(calls)
    if not names:
        return ""
    ev = {v.instance: v for v in a.events}
    kinds = [k for k in events.SHOWN if any(k in v.means for v in a.events)]
    head = ["instance", *(["system calls"] if calls else []), *kinds]

    def cell(value: float | None, change: Change | None) -> str:
        return "-" if value is None else events.figure(value, change)

    body = [[n, *([cell(calls[n].per_request, calls[n].change) if n in calls else "-"] if calls else []),
             *(cell(ev[n].means.get(k), ev[n].changes.get(k)) if n in ev else "-" for k in kinds)] for n in names]
    return (f"<h2>What the server did per request at the peak</h2><p>{_text(COUNTERS)}</p>" + _table(head, body))
