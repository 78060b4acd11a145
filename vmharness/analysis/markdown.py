"""The report as Markdown (`report --format markdown`, report.md): the answer's table first (summary.py)
with the warnings as quotes, then the detail, the changes and every point as tables. A run folder
someone uploaded is hostile data: every piece of text placed here goes through textsafe.markdown, so
that an instance, function or folder name
never becomes a tag, a link, a code span, a table's cell break or a heading; the renderer's own markup
(`**`, `|`, `- `, backticks around a name) is the only markup in the document."""

from __future__ import annotations

from typing import Any

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
from vmharness.analysis.cells import PERCENTILES
from vmharness.analysis.headline import pct
from vmharness.analysis.report import method_of, peak_text, rows_of, warning
from vmharness.analysis.saturation import Analysis
from vmharness.textsafe import markdown as md


def _items(lines: list[str]) -> list[str]:
    return [f"- {md(v.strip())}" for v in lines]


def answer(s: dict[str, Any]) -> list[str]:
    """The summary (summary.py) first: the warnings that void or limit the answer, each with what to do,
    the table under its caption, what explains each cost, then the other warnings."""
    out = [w for item in s["warnings"] for w in [*warning("> **Warning:** ", item["text"], "> ", md),
                                                  f"> *Do:* {md(item['do'])}", ""]]
    out += [f"**{md(s['caption'])}**", ""]
    if s["rows"]:
        out += ["| " + " | ".join(map(md, s["columns"])) + " |", "|---|---|---|---|",
                *("| " + " | ".join(map(md, row)) + " |" for row in summary.body(s)), ""]
    why = _items([f"{r['name']}: why: {r['why']}" for r in s["rows"] if r.get("why")])
    return out + why + ([""] if why else []) + [w for f in s["notes"] for w in [*warning("> **Warning:** ", f, "> ",
                                                                                         md), ""]]


def render(a: Analysis) -> str:
    out = answer(summary.build(a))
    if a.peak is not None:
        out += ["", f"Baseline `{md(a.baseline)}`: **{md(peak_text(a))}**.", ""]
        out += [w for f in summary.on_curve(a.flags) for w in [*warning("> **Warning:** ", f, "> ", md), ""]]
        if a.at_peak is not None and (said := sides.line(a.at_peak, a.peak)):
            out += [md(f"{said[0].upper()}{said[1:]}."), ""]
        for viewed in (exits.lines(a.exits, a.exits_note, a.peak), events.lines(a.events, a.peak),
                       syscalls.lines(a.calls), profiles.lines(a.profiles), syscalls.why(a.why),
                       switch_why.lines(a.switch_why)):
            if viewed:
                out += [md(viewed[0]), "", *_items(viewed[1:]), *([""] if viewed[1:] else [])]
        if a.changes:
            out += ["| instance | method | throughput | " + " | ".join(f"p{q}" for q in PERCENTILES) + " |",
                    "|---|---|---|" + "---|" * len(PERCENTILES)]
            for name, ch in sorted(a.changes.items()):
                out.append(f"| {md(name)} | {md(method_of(a, name))} | {pct(ch['throughput'], True)} | "
                           + " | ".join(pct(ch["p" + q], True) for q in PERCENTILES) + " |")
            out.append("")
    if study := studies.lines(a.study, a.peak):
        out += [md(study[0]), "", *_items(study[1:]), ""]
    if a.control is not None:
        out += [*_items([variants.control_line(a.control)]), ""]
    if noise := noise_report.lines(a):
        out += [*_items(noise), ""]
    for d in a.variants:
        out += [f"What `{md(d.instance)}` ran, against `{md(a.baseline)}`:", ""]
        out += [f"- {md(line)}" for line in d.lines] or ["- nothing differs"]
        out.append("")
    rows = rows_of(a)
    if rows:
        out += _table(rows)
    if a.load is not None and a.load.rows:
        out += ["", f"**{md(loadcurve.title(a.load))}**", "", *_table(loadcurve.rows(a.load))]
    return "\n".join(out) + "\n"


def _table(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as a table: a string cell escaped (it may be a name), a number as it is."""
    keys = list(rows[0])
    return (["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
            + ["| " + " | ".join("" if r[k] is None else md(r[k]) if isinstance(r[k], str) else str(r[k])
                                 for k in keys) + " |" for r in rows])
