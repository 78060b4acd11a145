"""The answer's table for a paper (`report --format latex`, report.tex): the summary (summary.py) as LaTeX
macros, so that a paper's text cites a figure by name (`\\vmhPtiCost{}`) instead of a number copied by
hand, and its table is the report's own. The file only defines macros (`\\newcommand`): `\\input` it
in the preamble, then place `\\vmhTable` (a booktabs tabular: `\\usepackage{booktabs}`) and the rest
where they belong (docs/statistics.md, "For a paper").

A run folder someone uploaded is hostile data: every piece of its text here goes through
textsafe.latex, so that a name never runs a command (`\\input`, `\\write18`) or breaks the table; the
macros' names are made of letters alone from the names (`macro_stems`), never of their text raw."""

from __future__ import annotations

import re
from typing import Any

from vmharness.textsafe import latex as tex

PREFIX = "vmh"
# the figures each row defines, after its stem: throughput's change (the cost of turning it on) and p99's,
# each with its interval
ROW_MACROS = {"Cost": ("throughput", "change"), "CostInterval": ("throughput", "interval"),
              "Latency": ("p99", "change"), "LatencyInterval": ("p99", "interval")}
# the run's own: none ends as a row's does, so no row's name can make one of them
RUN_MACROS = ("Reference", "Connections", "RequestsPerSecond", "Level", "Caption", "Table", "Warnings")
DIGITS = ("Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine")
NONE = "n/a"


def _spelled(n: int) -> str:
    return "".join(DIGITS[int(d)] for d in str(n))


def _stem(name: str) -> str:
    """A name's letters and digits as one word in capitals (`spectre_v2`: `SpectreVTwo`): TeX's macro
    names are letters alone, so a digit is spelled and every other character is a break."""
    parts = re.findall(r"[A-Za-z]+|[0-9]", name)
    return "".join(DIGITS[int(p)] if p.isdigit() else p[0].upper() + p[1:].lower() for p in parts)


def macro_stems(names: list[str]) -> list[str]:
    """Each name's macros' stem (`pti`: `vmhPti`), in order, unique among the names and the run's macros: a name
    without letters or digits is `vmhRowN` (N its place, spelled), and a stem taken before gets `Again`
    and a number (spelled) until none of its macros is taken."""
    taken = {PREFIX + m for m in RUN_MACROS}
    out: list[str] = []
    for i, name in enumerate(names, 1):
        base = PREFIX + (_stem(name) or "Row" + _spelled(i))
        stem, n = base, 1
        while any(stem + m in taken for m in ROW_MACROS):
            n += 1
            stem = f"{base}Again{_spelled(n)}"
        out.append(stem)
        taken |= {stem + m for m in ROW_MACROS}
    return out


def _pct(value: Any) -> str:
    return NONE if value is None else f"\\ensuremath{{{float(value) * 100:+.1f}\\%}}"


def _figure(c: dict[str, Any] | None, what: str) -> str:
    """A change (`change`) or its interval (`interval`): a number of the summary's, else n/a."""
    if c is None or c["change"] is None:
        return NONE
    if what == "change":
        return _pct(c["change"])
    return NONE if c["low"] is None else f"{{[}}{_pct(c['low'])}, {_pct(c['high'])}{{]}}"


def _cell(c: dict[str, Any] | None) -> str:
    """A table's cell: the change and its interval, or why it has none (the summary's words)."""
    if c is None:
        return "--"
    if c["change"] is None or c["low"] is None:
        return tex(c["text"])
    return f"{_figure(c, 'change')} {_figure(c, 'interval')}"


def _define(name: str, body: str) -> str:
    return f"\\newcommand{{\\{name}}}{{{body}}}"


def render(s: dict[str, Any]) -> str:
    """The summary as a file of LaTeX macros: the run's figures, each row's, the caption, the
    warnings that void or limit the answer (an itemize, or nothing) and the table."""
    stems = macro_stems([r["name"] for r in s["rows"]])
    rps = s["requests_per_s"]
    out = ["% vmharness report: the answer's table and its figures as macros (docs/statistics.md)",
           _define(PREFIX + "Reference", tex(s["reference"])),
           _define(PREFIX + "Connections", NONE if s["connections"] is None else str(int(s["connections"]))),
           _define(PREFIX + "RequestsPerSecond", NONE if rps is None else f"{float(rps):,.0f}".replace(",", "{,}")),
           _define(PREFIX + "Level", f"{float(s['level']) * 100:.0f}\\%"),
           _define(PREFIX + "Caption", tex(s["caption"]))]
    for r, stem in zip(s["rows"], stems, strict=True):
        out.append(f"% {tex(r['name'])}")
        out += [_define(stem + m, _figure(r[key], what)) for m, (key, what) in ROW_MACROS.items()]
    items = [f"\\item {tex(w['text'])} \\emph{{Do:}} {tex(w['do'])}" for w in s["warnings"]]
    out.append(_define(PREFIX + "Warnings", "\n".join(["%", "\\begin{itemize}", *items, "\\end{itemize}"])
                       if items else ""))
    head = " & ".join(tex(c) for c in s["columns"])
    rows = [f"{tex(r['name'])} & {_cell(r['throughput'])} & {_cell(r['p99'])} & {tex(r['verdict'])} \\\\"
            for r in s["rows"]]
    out.append(_define(PREFIX + "Table", "\n".join(
        ["%", "\\begin{tabular}{@{}lllp{0.3\\linewidth}@{}}", "\\toprule", f"{head} \\\\", "\\midrule",
         *(rows or [f"\\multicolumn{{4}}{{@{{}}l}}{{{NONE}}} \\\\"]), "\\bottomrule", "\\end{tabular}"])))
    return "\n".join(out) + "\n"
