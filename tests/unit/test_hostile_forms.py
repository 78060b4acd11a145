"""Untrusted text in every output form (vmharness/textsafe.py, docs/safety.md "Untrusted text in every
output form"): a run folder someone uploaded names its instances, its study's switches, its system calls,
its profiles' functions and itself with markup, formulas, mathtext, escape sequences and direction
characters. `report` in every form (`--format text|markdown|csv|json|latex`, `--out` with the page, the
figures and the flame graphs) and `compare` run on it for real (tests/hostile_kit.py), and each form is
held to its rule: no raw `<` or `>` of a name in Markdown, HTML or SVG, no link or heading or table cell
made by a name in Markdown, no command of a name's in LaTeX, every SVG an XML document, no CSV cell from
the folder beginning a formula, no control or direction character in any text, no traceback for a name
that is mathtext, exit 0."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import hostile_kit
from tests.hostile_kit import Build, Case, Outcome, Outcomes, both
from tests.unit import profile_fixtures as fx
from tests.unit.test_page import self_contained
from vmharness.analysis import flame

RUNS = Path(__file__).parent / "golden" / "runs"
TAG = "<img src=x onerror=alert(1)>"
MATH = "$\\frac{$"  # unbalanced mathtext: matplotlib's parser stops the drawing with an error
SPOOF = "\x1b[2J\r\n\u202eevil\u2066\u200e\u200b"  # clear the screen, a line of its own, shown reversed
# the recorded run's instances renamed: the variant begins a formula, the control a heading, the baseline
# a list item; each holds markup, Markdown's own syntax, mathtext and what hides text on a terminal
NAMES = {"pti": f"=HYPERLINK(1)|{TAG} {MATH}", "control": f"# [x](javascript:alert(1)) `c|d` {SPOOF}",
         "baseline": f"-b $\\foo$ {TAG}\ud800"}
FOLDER = f"r{TAG}|{MATH}\u202e"  # compare's second run folder
CALL = f"@SUM(1){TAG}{SPOOF}"  # a system call's name in the baseline's counted point
FRAME = f"{TAG}`|{MATH}\x1b[2J\x07\u202eevil\u2066\u200e"  # a function's (no ';' nor line break: a frame's own)
SWITCH = f"+{TAG}{MATH}"  # an attribution study's switch
# what a text form must never hold raw: C0 but LF (and the CR of CSV's CR LF), DEL, C1, direction and
# zero-width characters, a lone surrogate
# what starts a block of a name's at a line's start, or inside the renderer's list item or quote: a
# heading, a link's definition, a list
BLOCK = re.compile(r"\s*(#|\[|\d+[.)]\s)|[-+*>]\s+(#|\[|\d+[.)]\s|[-+*>]\s)")
RAW = re.compile("[\x00-\x09\x0b-\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
                 "\ud800-\udfff]|\r(?!\n)")


def _rename(value: Any, names: dict[str, str]) -> Any:
    """Every string of a record or manifest that is an instance's name, or a key beginning with one."""
    if isinstance(value, dict):
        return {names.get(k, k): _rename(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, names) for v in value]
    if isinstance(value, str):
        head, sep, rest = value.partition("/")
        return names[value] if value in names else names[head] + sep + rest if sep and head in names else value
    return value


def _recorded(folder: str = "rd") -> Build:
    """The recorded run (TCG, three instances, two boots) renamed, the variant's command line holding
    the tag too, and a counted point of the baseline whose calls are named by CALL."""
    def build(cwd: Path) -> None:
        with tarfile.open(RUNS / "run.tar.xz") as t:
            t.extractall(cwd / folder, filter="data")
        rd = cwd / folder
        manifest = _rename(json.loads((rd / "manifest.json").read_text()), NAMES)
        (rd / "manifest.json").write_text(json.dumps(manifest))
        records = []
        for ln in (rd / "records.jsonl").read_text().splitlines():
            r = _rename(json.loads(ln), NAMES)
            if r.get("kind") == "session" and r.get("instance") == NAMES["pti"]:
                r["cmdline"] += f" x={TAG}"
            records.append(r)
        b = NAMES["baseline"]
        records += [{"kind": "syscalls", "key": f"{b}/syscalls/{it}", "instance": b, "connections": 8,
                     "iteration": it, "ok": True, "client": {"requests_per_s": 1900.0, "requests": 3800},
                     "syscalls": {"server": 11400, "by_call": {CALL: 7600, "writev": 3800}, "all": 12000,
                                  "dropped": 0}} for it in range(2)]
        (rd / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return build


def _profiled(cwd: Path) -> None:
    """base and pti profiled at their peak, pti's time grown in a function named FRAME."""
    rd = cwd / "rp"
    rd.mkdir()
    (rd / "manifest.json").write_text(json.dumps({"kind": "bench", "config": {"instance": [{"name": "base"},
                                                                                          {"name": "pti"}]}}))
    stacks = {s.replace("syscall_enter_from_user_mode_[k]", FRAME): float(n) for s, n in fx.BASE.items()}
    grown = {s: n * (3.0 if FRAME in s else 1.0) for s, n in stacks.items()}
    records = [fx.measurement(name, 8, it, rps + 10 * it) for it in range(2)
               for name, rps in (("base", 1000.0), ("pti", 900.0))]
    records += [fx.write(rd, "base", stacks, 10000, 980.0), fx.write(rd, "pti", grown, 10000, 880.0)]
    (rd / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _study(cwd: Path) -> None:
    """An attribution study whose one switch is named SWITCH: the reference and the switch off (all off)."""
    rd = cwd / "rs"
    rd.mkdir()
    instances = [{"name": "on"}, {"name": f"no-{SWITCH}"}]  # as a study's manifest lists them, its variants too
    (rd / "manifest.json").write_text(json.dumps({"kind": "run", "config": {"instance": instances,
                                                                             "study": {"switches": [SWITCH]}}}))
    rates = {"on": 1000.0, f"no-{SWITCH}": 1250.0}
    records = [fx.measurement(name, 8, it, rps * luck) for it, luck in enumerate((1.0, 1.01, 0.99, 1.02))
               for name, rps in rates.items()]
    (rd / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


# checks, one per form: each is given the form's text and says what is wrong in it ---------------------
def _plain(text: str) -> None:
    """Text (the terminal's, and every form's): no control, direction or zero-width character raw."""
    assert not RAW.search(text), RAW.search(text)
    assert "\nevil" not in text and not any(ln.startswith(("evil", "\u202e")) for ln in text.splitlines())


def _no_markup(text: str) -> None:
    """Markdown, HTML and SVG: no tag of a name's, nor its `>`."""
    _plain(text)
    assert "<img" not in text and "onerror=alert(1)>" not in text and "alert(1)>" not in text


def _markdown(text: str) -> None:
    _no_markup(text)
    assert "](javascript" not in text and "$\\frac{$" not in text and "`c|d`" not in text
    for ln in text.splitlines():
        assert not BLOCK.match(ln), ln
        if ln.startswith("|"):  # a table's row: as many cells as its header
            assert ln.count("|") == _header_cells(text, ln), ln


def _header_cells(text: str, row: str) -> int:
    lines = text.splitlines()
    i = lines.index(row)
    while i > 0 and lines[i - 1].startswith("|"):
        i -= 1
    return lines[i].count("|")


def _csv(text: str) -> None:
    _plain(text)
    for row in csv.reader(io.StringIO(text)):
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20"):
                float(cell)  # only a number may begin so


def _json(text: str) -> None:
    assert text.isascii() and not RAW.search(text), RAW.search(text)
    assert json.loads(text)


def _html(text: str) -> None:
    """The page: no markup of a name's, no script, nothing fetched (test_page.self_contained); each flame
    graph an <img> of a data: URI whose SVG holds the names escaped as every SVG of the report does."""
    images = re.findall(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]*)"', text)
    _no_markup(re.sub(r'<img src="data:image/svg\+xml;base64,[A-Za-z0-9+/=]*"', "", text))  # the page's own
    tags = self_contained(text)
    assert len(images) == sum(t == "img" for t, _ in tags)
    for svg in images:
        _svg(base64.b64decode(svg).decode())


def _svg(text: str) -> None:
    _no_markup(text)
    ET.fromstring(text.encode())  # a well-formed XML document


# the LaTeX renderer's own commands: every other backslash would be a name's, run by TeX
TEX_OWN = re.compile(r"\\(?:vmh[A-Za-z]+|newcommand|begin|end|item|emph|ensuremath|pm|toprule|midrule|bottomrule"
                     r"|linewidth|multicolumn|text(?:backslash|asciicircum|asciitilde|less|greater|bar|quotedblright)"
                     r"(?![A-Za-z])|[%{}$&#_\\])")


def _latex(text: str) -> None:
    """LaTeX: no command but the renderer's (so no `\\input` or `\\write18` of a name's), and its braces
    balanced: a name cannot close the macro it stands in."""
    _plain(text)
    assert not re.search(r"\\", TEX_OWN.sub("", text)), TEX_OWN.sub("", text)
    depth = 0
    for c in re.sub(r"\\[{}]", "", text):
        depth += {"{": 1, "}": -1}.get(c, 0)
        assert depth >= 0
    assert depth == 0


FORMS: dict[str, Callable[[str], None]] = {".txt": _plain, ".md": _markdown, ".csv": _csv, ".json": _json,
                                            ".html": _html, ".svg": _svg, ".tex": _latex}
OUT = ("out",)
CASES = [
    Case("text", ("report", "rd", "--full"), ("saturation point",), _recorded(), code=0),
    Case("short-text", ("report", "rd"), ("ANSWER",), _recorded(), code=0),
    Case("markdown", ("report", "rd", "--format", "markdown"), ("ANSWER",), _recorded(), code=0),
    Case("csv", ("report", "rd", "--format", "csv"), ("requests_per_s",), _recorded(), code=0),
    Case("json", ("report", "rd", "--format", "json"), ('"rows"',), _recorded(), code=0),
    Case("latex", ("report", "rd", "--format", "latex"), ("\\vmhTable",), _recorded(), code=0),
    Case("out", ("report", "rd", "--out", "out"), ("wrote",), _recorded(), code=0, may_write=OUT),
    Case("compare-text", ("compare", "rd", FOLDER), ("saturation point",), both(_recorded(), _recorded(FOLDER)),
         code=0),
    Case("compare-markdown", ("compare", "rd", FOLDER, "--format", "markdown"), ("ANSWER",),
         both(_recorded(), _recorded(FOLDER)), code=0),
    Case("compare-out", ("compare", "rd", FOLDER, "--out", "out"), ("wrote",), both(_recorded(), _recorded(FOLDER)),
         code=0, may_write=OUT),
    Case("profiles-out", ("report", "rp", "--out", "out"), ("wrote",), _profiled, code=0, may_write=OUT),
    Case("profiles-markdown", ("report", "rp", "--format", "markdown"), ("ANSWER",), _profiled, code=0),
    Case("study-out", ("report", "rs", "--out", "out"), ("wrote",), _study, code=0, may_write=OUT),
    Case("study-markdown", ("report", "rs", "--format", "markdown"), ("ANSWER",), _study, code=0),
    Case("study-latex", ("report", "rs", "--format", "latex"), ("\\vmhTable",), _study, code=0),
    Case("compare-latex", ("compare", "rd", FOLDER, "--format", "latex"), ("\\vmhTable",),
         both(_recorded(), _recorded(FOLDER)), code=0),
    # an error's hint names the instances: one line, whatever their names hold
    Case("error-hint", ("report", "rd", "--baseline", "nope"), ("--baseline 'nope' is not an instance",),
         _recorded()),
]
STDOUT = {"text": _plain, "markdown": _markdown, "csv": _csv, "json": _json, "latex": _latex}
outcomes = hostile_kit.fixture(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_run_folder_renders_in_every_form(case: Case, outcomes: Outcomes) -> None:
    """Exit 0 (or 2 and one line), no traceback, nothing changed but --out; stdout held to its form's rule,
    stderr to text's."""
    o = outcomes.by_case[case.id]
    hostile_kit.check(case, o)
    _plain(o.stderr)
    STDOUT.get(case.id.rsplit("-", 1)[-1], _plain)(o.stdout)


def _files(o: Outcome) -> dict[str, Path]:
    assert o.cwd is not None
    return {p.name: p for p in sorted((o.cwd / "out").iterdir()) if not p.name.startswith(".")}


@pytest.mark.parametrize("cid", [c.id for c in CASES if c.may_write])
def test_every_file_of_the_report_holds_to_its_forms_rule(cid: str, outcomes: Outcomes) -> None:
    for path in _files(outcomes.by_case[cid]).values():
        if path.suffix in FORMS:
            FORMS[path.suffix](path.read_text())


@pytest.mark.parametrize(("cid", "shown"), [
    ("text", "=HYPERLINK(1)|<img src=x onerror=alert(1)> $\\frac{$"),
    ("text", "# [x](javascript:alert(1)) `c|d` \\x1b[2J\\x0d\\x0a\\u202eevil\\u2066\\u200e\\u200b"),
    ("short-text", "# [x](javascript:alert(1)) `c|d` \\x1b[2J\\x0d\\x0a\\u202eevil\\u2066\\u200e\\u200b"),
    ("markdown", "=HYPERLINK(1)&#124;&lt;img src=x onerror=alert(1)&gt; &#36;\\frac{&#36;"),
    ("markdown", "| &#35; [x&#93;(javascript:alert(1)) &#96;c&#124;d&#96; \\x1b[2J\\x0d\\x0a\\u202eevil"),
    ("json", '"instance": "=HYPERLINK(1)|<img src=x onerror=alert(1)> $\\\\frac{$"'),
    ("json", '"instance": "# [x](javascript:alert(1)) `c|d` \\u001b[2J\\r\\n\\u202eevil\\u2066\\u200e\\u200b"'),
    ("csv", "'=HYPERLINK(1)|<img src=x onerror=alert(1)> $\\frac{$"),
    ("csv", "'-b $\\foo$ <img src=x onerror=alert(1)>\\ud800"),
    ("compare-markdown", "r&lt;img src=x onerror=alert(1)&gt;&#124;&#36;\\frac{&#36;\\u202e/"),
    ("profiles-markdown", "&lt;img src=x onerror=alert(1)&gt;&#96;&#124;&#36;\\frac{&#36;\\x1b[2J\\x07\\u202eevil"),
    ("study-markdown", "- throughput: +&lt;img src=x onerror=alert(1)&gt;&#36;\\frac{&#36;: costs 20.0%"),
    ("latex", "=HYPERLINK(1)\\textbar{}\\textless{}img src=x onerror=alert(1)\\textgreater{} "
              "\\$\\textbackslash{}frac\\{\\$"),
    ("study-latex", "\\newcommand{\\vmhImgSrcXOnerrorAlertOneFracCost}"),
], ids=lambda v: str(v)[:20])
def test_a_name_is_shown_escaped_for_its_form(cid: str, shown: str, outcomes: Outcomes) -> None:
    """Each form shows the name, written by its rule: nothing of it left out, nothing of it markup."""
    assert shown in outcomes.by_case[cid].stdout, outcomes.by_case[cid].stdout[:3000]


def test_every_figure_is_drawn_with_mathtext_in_its_names(outcomes: Outcomes) -> None:
    """A name that is mathtext is drawn as text in every figure the report draws: each is there."""
    drawn = {n for c in CASES if c.may_write for n in _files(outcomes.by_case[c.id])}
    stems = {"throughput", "latency", "latency-ccdf", "latency-load", "attribution"}
    assert {f"{s}.{e}" for s in stems for e in ("png", "svg", "pdf")} <= drawn


def test_the_flame_graph_names_the_function_escaped(outcomes: Outcomes) -> None:
    assert flame.found() is not None, "inferno-flamegraph is not installed: run `make inferno`"
    svg = _files(outcomes.by_case["profiles-out"])["flame-pti.svg"].read_text()
    _svg(svg)
    assert "&lt;img src=x onerror=alert(1)&gt;" in svg and "\\u202eevil" in svg


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)
