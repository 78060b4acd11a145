"""One page to read, self-contained so that it can be mailed: the answer first, and the rest in sections a
reader opens when needed (<details>, no script).

The first screen (1280×800) holds the warnings that void or limit the answer (summary.py), its table,
and beside it the forest plot (forest.py): every change with its interval on one axis. Then the other
warnings, and a section each: the saturation curve, latency (percentiles, the distribution, against
load), an attribution study's waterfall, why each cost (counters, system calls, the profiles with their
flame graphs), noise, planning and method, the positive control, the host and guests measured, and
every point. No table is wider than the page: each scrolls inside a box of its own.

Nothing is fetched: the figures the report drew in this call are inline SVG, and each flame graph (an
SVG inferno drew, carrying JavaScript for search and zoom) is an <img> of a data: URI, where an SVG's
script never runs. The page holds no script of its own; every column is in the CSV and the JSON beside
it. Every text from a run folder is escaped (textsafe.html)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, NamedTuple

from vmharness import userfile
from vmharness.analysis import (
    events,
    exits,
    flame,
    loadcurve,
    noise_report,
    profiles,
    report,
    sides,
    studies,
    summary,
    switch_why,
    variants,
)
from vmharness.analysis.saturation import Analysis
from vmharness.stats import Change
from vmharness.textsafe import html as _text

STYLE = """body{font:14px/1.4 system-ui,sans-serif;max-width:1240px;margin:.8em auto;padding:0 1em;color:#222;
overflow-wrap:anywhere}h1{font-size:1.35em;margin:.2em 0 .4em}p{white-space:pre-wrap;margin:.3em 0}
.warn{background:#fff3cd;border-left:4px solid #e0a800;padding:.2em .6em;margin:.25em 0;font-size:13px}
.first{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}.answer{flex:1 1 480px;min-width:0;
background:#e7f1ff;border-left:4px solid #0b5ed7;padding:.2em .8em;margin:.4em 0}.forest{flex:0 1 600px;margin:.4em 0}
.forest svg{width:min(100%,760px)}
.box{max-width:100%;overflow-x:auto}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;overflow-wrap:normal}th{background:#f2f2f2}
.answer td:first-child,.answer td:last-child{text-align:left}
figure{margin:1em 0}svg,img{max-width:100%;height:auto}details{border-top:1px solid #ddd;padding:.3em 0}
summary{font-size:1.1em;font-weight:600;cursor:pointer}"""

MAX_FIGURE = 64 << 20  # bytes: an SVG figure the report just wrote, read back into the page

ALL_COLUMNS = ("every column of every point, and each interval's limits: report.csv, report-load.csv and "
               "report.json beside this page")
COUNTERS = ("system calls counted in points of their own ([explain] syscalls); kernel events from the guest's "
            "sampler, less what its kernel does each second without load; each change against the baseline "
            "paired by block, with its 95% interval")

LATENCY_METHOD = ("latency: percentiles (inverted CDF) of each iteration's histogram, every client's per-microsecond "
                  "counts summed; a change in one is a ratio like throughput's")


def render(a: Analysis, title: str, figures: list[Path], flames: list[Path] | None = None) -> str:
    """The page. `figures` and `flames`: the files this report drew, in this call (publish.py)."""
    s = summary.build(a)
    warnings, lead, _notes = answer(s)
    load = set(a.load.flags) if a.load is not None else set()
    more = [f for f in s["notes"] if f not in load]  # an open-loop point's stands beside the load's table
    svgs = {f.stem: inline_svg(f) for f in figures if f.suffix == ".svg"}
    drawn = svgs.get("forest")  # forest.py: every change with its interval, on one axis
    first = f'<div class="first">{lead}' + (f'<figure class="forest">{drawn}</figure>' if drawn else "") + "</div>"
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_text(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{_text(title)}</h1>{warnings}{first}"
            + (_section(f"{len(more)} more warning{'s' * (len(more) != 1)}", _warned(more)) if more else "")
            + "".join(_section(name, body) for name, body in _sections(a, svgs, flames or []))
            + "</body></html>\n")


def _sections(a: Analysis, svgs: dict[str, str], flames: list[Path]) -> list[tuple[str, str]]:
    """Each section a reader opens when needed, as (heading, body); an empty one is left out."""
    def figs(*stems: str) -> str:
        return "".join(f"<figure>{svgs[stem]}</figure>" for stem in stems if stem in svgs)

    at_peak = [said] if a.at_peak is not None and a.peak is not None and (said := sides.line(a.at_peak, a.peak)) else []
    saturation = ([f"baseline {a.baseline}: {report.peak_text(a)}"] if a.peak is not None else []) + at_peak
    load = (f"<h3>Latency against load</h3><p>{_text(loadcurve.title(a.load))}</p>"
            f"{html_table(*loadcurve.table(a.load))}" + _warned(a.load.flags) if a.load is not None and a.load.rows
            else "")
    why = (_lines([*exits.lines(a.exits, a.exits_note, a.peak), *events.lines(a.events, a.peak),
                   *report.calls_lines(a)] if a.peak is not None else [])
           + _counters(a) + _profiles(a.profiles, flames, a.switch_why))
    methods = sorted({c.method for ch in a.changes.values() for c in ch.values()})
    method = ("<h3>Method</h3><ul>" + "".join(f"<li>{_text(m)}</li>" for m in
                                           [f"the peak: {report.PEAK_METHOD}", *(f"changes: {m}" for m in methods),
                                            LATENCY_METHOD])
              + "</ul><p>docs/statistics.md explains each.</p>") if a.peak is not None else ""
    columns, points, foot = report.points_table(a)
    host = [f for f, kind in a.under.items() if kind == "host"]
    capacity = [f"client {c.get('machine')}: wrk against nginx on itself {_rate(c.get('closed_per_s'))}, "
                f"oha {_rate(c.get('open_per_s'))}" for c in a.capacity]
    return [(name, body) for name, body in [
        ("The saturation curve", figs("throughput") + _lines(saturation) + _warned(summary.on_curve(a.flags))),
        ("Latency: percentiles, distribution, against load",
         figs("latency", "latency-ccdf", "latency-load") + _lines(report.change_lines(a)) + load),
        ("The attribution waterfall", figs("attribution") + _lines(studies.lines(a.study, a.peak))),
        ("Why each cost: counters, system calls, profiles", why),
        ("Noise, planning and method",
         _lines(noise_report.lines(a)) + method),
        ("The positive control", _lines([variants.control_line(a.control)] if a.control is not None else [])),
        ("The host and guests measured", _lines([*host, *report.variant_lines(a), *capacity])),
        ("Every point", html_table(columns, points) + _lines(foot) + f"<p>{ALL_COLUMNS}</p>"),
    ] if body]


def _rate(value: object) -> str:
    """A client's capacity as its record holds it (a number, or anything else: not measured)."""
    return f"{value:,.0f} req/s" if isinstance(value, (int, float)) and not isinstance(value, bool) else "not measured"


def _section(name: str, body: str) -> str:
    return f"<details><summary>{_text(name)}</summary>{body}</details>"


def _warned(flags: list[str]) -> str:
    return "".join(f'<div class="warn">{_text(f)}</div>' for f in flags)


def _lines(lines: list[str]) -> str:
    return "".join(f"<p>{_text(line)}</p>" for line in lines)


def inline_svg(path: Path) -> str:
    """A figure this report drew in this call, inline: from its <svg> on (no prolog, no DOCTYPE)."""
    drawn = userfile.text(path, MAX_FIGURE)
    return drawn[drawn.index("<svg"):]


def answer(s: dict[str, Any]) -> tuple[str, str, str]:
    """The summary (summary.py) as the page begins: the warnings that void or limit the answer, each with
    what to do; the table under its caption with what explains each cost; and the other warnings."""
    warnings = "".join(f'<div class="warn">{_text(w["text"])}<br><i>Do:</i> {_text(w["do"])}</div>'
                       for w in s["warnings"])
    why = "".join(f"<li>{_text(r['name'])}: why: {_text(r['why'])}</li>" for r in s["rows"] if r.get("why"))
    lead = (f'<div class="answer"><p><b>{_text(s["caption"])}</b></p>'
            + (html_table(s["columns"], summary.body(s)) if s["rows"] else "")
            + (f"<ul>{why}</ul>" if why else "") + "</div>")
    return warnings, lead, _warned(s["notes"])


class _Grown(NamedTuple):
    """One profile read against another on the page: a variant against the baseline, or a study's
    reference against a switch's leave-one-out."""
    name: str
    base: str
    grew: tuple[profiles.Grower, ...]
    svg: str  # its flame graph's file name, drawn or not
    title: str


def _profiles(v: profiles.View | None, flames: list[Path], switches: tuple[switch_why.Why, ...]) -> str:
    """Each variant's growers as a table, and its differential flame graph (flame.py) in an <img> of a
    data: URI: the SVG's own JavaScript never runs there; then each explained switch's in a study."""
    if v is None or not (v.growers or any(w.grew is not None for w in switches)):
        return ""
    drawn = {f.name: f for f in flames}
    out = [f"<h3>What grew per request in the profiles</h3><p>{_text(profiles.TEST)}</p>"]
    shown = [_Grown(name, v.baseline, grew, flame.file_name(name), name) for name, grew in v.growers.items()]
    shown += [_Grown(w.reference, w.against, w.grew, flame.switch_file(w.switch), f"{w.switch}: {w.reference}")
              for w in switches if w.grew is not None]
    for name, base, grew, svg, title in shown:
        out.append(f"<h4>{_text(title)} against {_text(base)}</h4>")
        if grew:
            out.append(html_table(["function", f"µs/request, {base}", name, f"share, {base}", name, "p"],
                              [[g.name, f"{g.us[0]:.3f}", f"{g.us[1]:.3f}", f"{g.share[0]:.1%}", f"{g.share[1]:.1%}",
                                f"{g.p:.1e}"] for g in grew]))
        else:
            out.append("<p>nothing grew</p>")
        if svg in drawn:
            out.append(f'<figure><img src="{_data_uri(drawn[svg])}" alt="differential flame graph of '
                       f'{_text(title)}"><figcaption>{_text(name)} against {_text(base)}, per '
                       "request (the server's work: the idle loop and the guest's other processes left out): widths "
                       f"are its time, red where a function's time per request grew, blue where it shrank; open "
                       f"{_text(svg)} beside this page to search and zoom</figcaption></figure>")
    return "".join(out)


def _data_uri(path: Path) -> str:
    """A flame graph inferno drew in this call, as an <img>'s data: URI: an image runs no script."""
    svg = userfile.read(path, flame.MAX_SVG, "inferno-flamegraph wrote more than a report holds")
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode()


def html_table(head: list[str], body: list[list[str]]) -> str:
    """A table as the text report prints it: its columns, each cell's text, in a box of its own that
    scrolls where the table is wider than the page."""
    return ('<div class="box"><table><tr>' + "".join(f"<th>{_text(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_text(c)}</td>" for c in row) + "</tr>" for row in body)
            + "</table></div>")


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
    return (f"<h3>What the server did per request at the peak</h3><p>{_text(COUNTERS)}</p>" + html_table(head, body))
