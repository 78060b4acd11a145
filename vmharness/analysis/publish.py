"""Every form of a report written into one folder (`report --out`, `compare --out`, a run's own
`report/`): text, Markdown, CSV, JSON, LaTeX (latex.py), the figures (PNG, SVG, PDF) and one HTML page,
and for a run with profiles each variant's differential flame graph (flame.py:
`flame-VARIANT.svg`, files a report writes only then).

The folder is the report's own (vmharness/system/owned.py): made and marked by the first report written
there, and refused when it is a symlink, another command's, or a folder of the user's that no report
wrote (their own `report.md` would be overwritten), unless `--force`. A report folder written before
folders were marked is recognised by holding all the files a report always writes, and no other. Every file
it may write is checked before the first is written (a link or a folder at one is refused, or with --force
a link replaced), so a refusal leaves the folder as it was; each is replaced by a rename, never written
through a link. A file of an earlier report there that this one does not write (a figure it does not draw,
the load's CSV) is removed, so that nothing in the folder answers for another report; an earlier run's
flame graphs, whose names are its variants', are the exception."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vmharness.analysis import flame, latex, loadcurve, markdown, page, report, summary
from vmharness.analysis.saturation import Analysis
from vmharness.errors import HarnessError
from vmharness.system import owned
from vmharness.textsafe import json_text

OWNER = "report"
HINT = "name a new folder, or one an earlier report wrote"
FORMS = ("report.txt", "report.md", "report.csv", "report.json", "report.tex", "report-load.csv", "report.html")
FIGURES = ("forest", "throughput", "latency", "latency-ccdf", "latency-load", "attribution")


def _names() -> list[str]:
    return [*FORMS, *(f"{stem}.{ext}" for stem in FIGURES for ext in ("png", "svg", "pdf"))]


def _legacy(_path: Path, entries: list[str]) -> bool:
    """A report folder from before markers: it holds every file a report always writes, and nothing
    a report does not (a folder holding the user's own report.md alone is not one)."""
    always = {"report.txt", "report.md", "report.csv", "report.json", "report.html", "throughput.png", "throughput.svg"}
    return always <= set(entries) <= set(_names())


def preflight(out: Path, flag: str, force: bool = False, more: list[str] | None = None) -> None:
    """The folder can take a report, and no link or folder is where a file of it goes (or `more` of
    them: a run's flame graphs), said before any work: writes nothing."""
    owned.preflight(out, OWNER, flag, force, _legacy, HINT)
    if out.is_dir():
        folder = owned.Folder(out, f"{flag} {out}", force)
        for name in [*_names(), *(more or [])]:
            folder.check(name, replacing=True)


def publish(a: Analysis, out: Path, title: str, flag: str = "--out", force: bool = False,
            figures: bool = True) -> list[Path]:
    """Every form of the report in `out` (`flag` names it in errors), its drawings unless `figures` is
    false; returns the files written."""
    # every target is checked before the first write (the marker's too): a link or a folder at the last one
    # would otherwise leave a report half rewritten
    preflight(out, flag, force, flame.names(a.profiles, a.switch_why))
    folder = owned.claim(out, OWNER, f"{flag} {out}", force, _legacy, HINT)
    try:
        written = []
        told = summary.build(a)
        forms = [("report.txt", report.text(a) + "\n"), ("report.md", markdown.render(a)),
                 ("report.csv", report.to_csv(a)), ("report.json", json_text(report.to_json(a)) + "\n"),
                 ("report.tex", latex.render(told))]
        if a.load is not None and a.load.rows:
            forms.append(("report-load.csv", report.csv_text(loadcurve.rows(a.load))))
        for name, content in forms:
            written.append(folder.write(name, content.encode()))
        drawn, flames = _draw(a, told, folder) if figures else ([], [])
        html = folder.write("report.html", page.render(a, title, drawn, flames).encode())
        folder.prune(_names(), [*written, *drawn, html])  # an earlier report's figure or load CSV that this has not
    except OSError as exc:
        raise HarnessError(f"{flag} {out}: cannot write there: {exc.strerror}",
                           "name a folder you can write to, on a disk with space") from exc
    return [*written, *drawn, *flames, html]


def _draw(a: Analysis, told: dict[str, Any], folder: owned.Folder) -> tuple[list[Path], list[Path]]:
    """The figures (matplotlib: imported only where they are drawn, not for a report's text) and the
    flame graphs, only of a run with profiles."""
    from vmharness.analysis import forest, plots

    figures = forest.draw(told, folder) + plots.throughput(a, folder)
    if a.peak is not None:
        figures += plots.latency(a, folder) + plots.ccdf(a, folder) + plots.waterfall(a, folder)
    if a.load is not None and a.load.rows:
        figures += plots.latency_vs_load(a.load, folder)
    return figures, flame.draw(a.profiles, folder, a.switch_why)
