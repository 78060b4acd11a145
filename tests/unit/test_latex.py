"""The answer's table for a paper (analysis/latex.py): its macros' names, and the file compiled by
pdflatex, as a paper would `\\input` it, for the recorded runs of the summary's golden tests
(test_summary.py) and for names that are LaTeX: each compiles, and a name's command runs nowhere.
pdflatex is one of `make deps`'s packages: a machine without it fails here, it does not skip."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_summary import _analysed
from vmharness.analysis import latex, summary

# what a name must not do when TeX reads it: read a file, write one, run a command, end the document
HOSTILE = ["\\input{/etc/passwd}", "a}\\immediate\\write18{id}", "\\end{document}", "$x^2$ & #1 ~ % _",
           "[3pt]*", "\\def\\x{", "}}}", "caf\u00e9 \u4e2d\x1b[2J\u202e", "<a|b>\"--``"]
DOCUMENT = ("\\documentclass{article}\n\\usepackage{booktabs}\n\\input{report.tex}\n\\begin{document}\n"
            "At \\vmhConnections{} connections (\\vmhRequestsPerSecond{} requests/s, \\vmhReference{}, "
            "\\vmhLevel{} intervals).\n{FIGURES}\n\\vmhWarnings\n"
            "\\begin{table}\\centering\\vmhTable\\caption{\\vmhCaption}\\end{table}\n\\end{document}\n")


def _compile(s: dict[str, Any], tmp_path: Path) -> str:
    """The summary's LaTeX in a document that cites each row's figures; pdflatex's log. A name read as a
    command would stop it (-halt-on-error), or open a file -recorder lists."""
    pdflatex = shutil.which("pdflatex")
    assert pdflatex is not None, "pdflatex is not installed: run `make deps` (texlive-latex-base)"
    stems = latex.macro_stems([r["name"] for r in s["rows"]])
    figures = " ".join(f"\\{stem}{m}{{}}" for stem in stems for m in latex.ROW_MACROS)
    (tmp_path / "report.tex").write_text(latex.render(s))
    (tmp_path / "doc.tex").write_text(DOCUMENT.replace("{FIGURES}", figures))
    env = {**os.environ, "TEXMFVAR": str(tmp_path / "texmf-var"), "TEXMFCONFIG": str(tmp_path / "texmf-config")}
    done = subprocess.run([pdflatex, "-interaction=nonstopmode", "-no-shell-escape", "-halt-on-error", "-recorder",
                           "doc.tex"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    log = (tmp_path / "doc.log").read_text(errors="replace")
    assert done.returncode == 0 and (tmp_path / "doc.pdf").read_bytes()[:5] == b"%PDF-", log[-3000:]
    opened = (tmp_path / "doc.fls").read_text()
    assert "/etc/passwd" not in opened and "runsystem" not in log, opened
    return log


@pytest.mark.parametrize("name", ["demo", "study"])
def test_a_recorded_run_compiles(name: str, tmp_path: Path) -> None:
    _compile(summary.build(_analysed(name, tmp_path)), tmp_path)


def _hostile(tmp_path: Path) -> dict[str, Any]:
    """The study's summary, its rows, reference, caption and warnings named by HOSTILE."""
    s = copy.deepcopy(summary.build(_analysed("study", tmp_path)))
    for r, name in zip(s["rows"], HOSTILE, strict=False):
        r["name"] = r["verdict"] = name
    s["reference"], s["caption"] = HOSTILE[0], " ".join(HOSTILE)
    s["warnings"] = [{"text": n, "do": n} for n in HOSTILE]
    return s


def test_names_that_are_latex_compile_as_text(tmp_path: Path) -> None:
    s = _hostile(tmp_path)
    out = latex.render(s)
    assert "\\textbackslash{}input\\{/etc/passwd\\}" in out
    assert "a\\}\\textbackslash{}immediate\\textbackslash{}write18\\{id\\}" in out
    _compile(s, tmp_path)


@pytest.mark.parametrize(("names", "stems"), [
    (["pti", "spectre_v2", "all switches"], ["vmhPti", "vmhSpectreVTwo", "vmhAllSwitches"]),
    (["pti", "PTI", "p-t-i", "ptiAgainTwo", "Pti"], ["vmhPti", "vmhPtiAgainTwo", "vmhPTI", "vmhPtiagaintwo",
                                                   "vmhPtiAgainThree"]),
    (["!!!", "\u4e2d", "x", "12"], ["vmhRowOne", "vmhRowTwo", "vmhX", "vmhOneTwo"]),
    (["reference", "requests per"], ["vmhReference", "vmhRequestsPer"]),  # a run's macro is no row's
])
def test_each_row_gets_macros_of_letters_unique(names: list[str], stems: list[str]) -> None:
    assert latex.macro_stems(names) == stems
    made = [s + m for s in stems for m in latex.ROW_MACROS] + [latex.PREFIX + m for m in latex.RUN_MACROS]
    assert len(set(made)) == len(made) and all(re.fullmatch("[A-Za-z]+", m) for m in made)


def test_a_run_without_an_answer_renders(tmp_path: Path) -> None:
    s = summary.build(_analysed("demo", tmp_path))
    s.update(connections=None, requests_per_s=None, rows=[])
    assert "\\newcommand{\\vmhConnections}{n/a}" in latex.render(s)
    _compile(s, tmp_path)
