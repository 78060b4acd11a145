"""`campaign report DIR --out REPORT`: every form of a campaign's report in one folder of the report's
own: campaign-report.txt, .md, .csv and .json as `--format` prints them, and one HTML page. The page
leads with the answer as one figure: each done run's throughput change against the baseline cell, with
its 95% interval, on one axis (analysis/forest.py, also written as forest.png, .svg and .pdf for a
paper), then the table of every run, the node pairs and the pair effect, and the notes.

The folder is the harness's (system/owned.py): made and marked by the first report written there, and
refused when it is a link or anyone else's. The page holds no script and fetches nothing; every text
from the campaign folder (cell, run, node names, why a run failed) is escaped (textsafe.html)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vmharness.analysis import forest, page
from vmharness.campaign import gather
from vmharness.system import owned
from vmharness.textsafe import html as _text
from vmharness.textsafe import json_text

OWNER = "campaign-report"
HINT = "name a new folder, or one an earlier campaign report wrote"
FORMS = ("campaign-report.txt", "campaign-report.md", "campaign-report.csv", "campaign-report.json",
         "campaign-report.html")
FIGURES = tuple(f"forest.{ext}" for ext in ("png", "svg", "pdf"))


def forest_summary(rep: dict[str, Any]) -> dict[str, Any]:
    """The runs with a throughput change, as forest.draw takes a report's summary: a row each."""
    rows = [{"name": f"{r['run']}/{r['instance']}",
             "throughput": {"change": r["throughput_change"], "low": r["change_low"], "high": r["change_high"]}}
            for r in rep["rows"] if r["throughput_change"] is not None]
    return {"rows": rows, "reference": rep["baseline"], "level": 0.95}


def html(rep: dict[str, Any], svg: str) -> str:
    """The page: `svg` the forest plot drawn in this call, inline ("" where no run has a change)."""
    title = f"campaign: {len({r['cell'] for r in rep['rows']})} cells against {rep['baseline']}"
    counts = ", ".join(f"{n} {s}" for s, n in rep["counts"].items())
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_text(title)}</title>"
           f"<style>{page.STYLE}</style></head><body><h1>{_text(title)}</h1><p>{_text(counts)}</p>"]
    if svg:
        out.append(f'<figure class="forest">{svg}</figure>')
    out.append(page.html_table(gather.HEADER, [gather.row_cells(r) for r in rep["rows"]]))
    if len(rep["pairs"]) > 1:
        out.append("<h3>Node pairs</h3>" + page.html_table(
            ["server", "client", "cells", "median throughput change"],
            [[p["server"], p["client"], str(len(p["cells"])), gather.pct(p["median_change"]) or "no change measured"]
             for p in rep["pairs"]]))
    if rep["pair_effects"]:
        out.append("<h3>Pair effect</h3>" + page.html_table(gather.EFFECT_HEADER,
                                                             [gather.effect(e) for e in rep["pair_effects"]]))
    out += [f'<div class="warn">{_text(n)}</div>' for n in rep["notes"]]
    return "".join(out) + "</body></html>\n"


def write(rep: dict[str, Any], out: Path, force: bool = False) -> list[Path]:
    """Every form into `out`, each file checked before the first is written; returns the files."""
    owned.preflight(out, OWNER, f"--out {out}", force, hint=HINT)
    if out.is_dir():
        existing = owned.Folder(out, f"--out {out}", force)
        for name in (*FORMS, *FIGURES):
            existing.check(name, replacing=True)
    folder = owned.claim(out, OWNER, f"--out {out}", force, hint=HINT)
    texts = {"txt": gather.text(rep) + "\n", "md": gather.markdown(rep), "csv": gather.csv(rep),
             "json": json_text(rep)}
    written = [folder.write(f"campaign-report.{ext}", body.encode()) for ext, body in texts.items()]
    figures = forest.draw(forest_summary(rep), folder)
    svg = next((page.inline_svg(f) for f in figures if f.suffix == ".svg"), "")
    written += figures
    written.append(folder.write("campaign-report.html", html(rep, svg).encode()))
    folder.prune(FIGURES, figures)  # an earlier report's forest plot, where none is drawn
    return written
