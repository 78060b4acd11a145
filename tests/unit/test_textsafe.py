"""Each output form's one function for untrusted text (vmharness/textsafe.py), on its own: what a hostile
name becomes, and that an ordinary one (an identifier, a figure with its sign) reads as before.
tests/unit/test_hostile_forms.py holds every form of the real report to the same rules."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from vmharness import textsafe

# (text, Markdown) -- an ordinary name or figure first, then what a hostile one becomes
MARKDOWN = [
    ("pti", "pti"), ("spectre_v2", "spectre_v2"), ("p99.9_us", "p99.9_us"), ("_base", "_base"),
    ("__irq_exit_rcu", "__irq_exit_rcu"), ("1.5-rc1", "1.5-rc1"), ("6.1.0-50-amd64", "6.1.0-50-amd64"),
    ("-39.1% [-95.1%, +655.7%]", "-39.1% [-95.1%, +655.7%]"),
    ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
    ("a|b", "a&#124;b"),  # a table's cell break
    ("[x](javascript:alert(1))", "&#91;x&#93;(javascript:alert(1))"),  # a link (and a definition's start)
    ("![x](y)", "![x&#93;(y)"), ("a [x][y]", "a [x&#93;[y]"),
    ("`c`", "&#96;c&#96;"), ("**b** ~~s~~", "&#42;&#42;b&#42;&#42; &#126;&#126;s&#126;&#126;"),
    ("_em_ __init__ _x _", "_em&#95; __init&#95;&#95; _x &#95;"), ("$x$", "&#36;x&#36;"),
    ("# head", "&#35; head"), ("- item", "&#45; item"), ("+ item", "&#43; item"), ("1. item", "1&#46; item"),
    ("===", "&#61;=="), ("---", "&#45;--"), ("- - -", "&#45; - -"), ("-", "&#45;"), ("2) x", "2&#41; x"),
    ("  > quote", "  &gt; quote"), ("&lt;", "&amp;lt;"),
    ("a\\", "a&#92;"), ("\\*", "&#92;&#42;"),  # a backslash that would escape the renderer's markup
    ("a\nb\x1b[2J\u202e", "a\\x0ab\\x1b[2J\\u202e"),  # the terminal's rule first
]


@pytest.mark.parametrize(("text", "shown"), MARKDOWN, ids=[t for t, _ in MARKDOWN])
def test_markdown(text: str, shown: str) -> None:
    assert textsafe.markdown(text) == shown


CSV = [("pti", "pti"), ("=1+2", "'=1+2"), ("+1", "'+1"), ("-1", "'-1"), ("@SUM(A1)", "'@SUM(A1)"),
       ("\uff1dcmd", "'\uff1dcmd"), ("\t=1", "\\x09=1"), ("\r=1", "\\x0d=1"), ("a=1", "a=1")]


@pytest.mark.parametrize(("text", "shown"), CSV, ids=[t for t, _ in CSV])
def test_csv_cell(text: str, shown: str) -> None:
    assert textsafe.csv_cell(text) == shown


# (text, LaTeX): an ordinary name or figure first, then what a hostile one becomes
LATEX = [
    ("pti", "pti"), ("spectre_v2", "spectre\\_v2"), ("-39.1% [-95.1%, +655.7%]", "-39.1\\% {[}-95.1\\%, +655.7\\%{]}"),
    ("\\input{/etc/passwd}", "\\textbackslash{}input\\{/etc/passwd\\}"),
    ("a}\\immediate\\write18{id}", "a\\}\\textbackslash{}immediate\\textbackslash{}write18\\{id\\}"),
    ("$x^2$ & #1 ~ %", "\\$x\\textasciicircum{}2\\$ \\& \\#1 \\textasciitilde{} \\%"),
    ("[3pt]*", "{[}3pt{]}{*}"),  # a row's end `\\` would read them as its options
    ("<a|b>\"", "\\textless{}a\\textbar{}b\\textgreater{}\\textquotedblright{}"),
    ("a--b ``c''", "a-{}-b `{}`c'{}'"), ("±1.5%", "\\ensuremath{\\pm}1.5\\%"),
    ("caf\u00e9 \u4e2d", "caf\\textbackslash{}u00e9 \\textbackslash{}u4e2d"),  # no default font draws them
    ("a\nb\x1b[2J\u202e", "a\\textbackslash{}x0ab\\textbackslash{}x1b{[}2J\\textbackslash{}u202e"),
]


@pytest.mark.parametrize(("text", "shown"), LATEX, ids=[t for t, _ in LATEX])
def test_latex(text: str, shown: str) -> None:
    assert textsafe.latex(text) == shown


@pytest.mark.parametrize("text", ["<b>&\"'", "\x00\x1b\x7f\x85", "\u202eevil\u2066\u200e\u200b\ufeff",
                                  "\ud800\ufffe\uffff", "a\r\nb"])
def test_html_stays_a_document(text: str) -> None:
    svg = f'<svg xmlns="http://www.w3.org/2000/svg"><text a="{textsafe.html(text)}">{textsafe.html(text)}</text></svg>'
    ET.fromstring(svg.encode())  # well-formed: no character XML refuses, nothing of the text markup
    assert "<b>" not in svg


@pytest.mark.parametrize("text", ["\x1b[2J", "\u202e", "\ud800", "a\nb", "é"])
def test_json_is_ascii(text: str) -> None:
    out = textsafe.json_text({"name": text})
    assert out.isascii() and "\n  " in out and json.loads(out) == {"name": text}


@pytest.mark.parametrize("c", ["\u061c", "\u200b", "\u200d", "\u2060", "\ufeff", "\ud800", "\udfff", "\ufffe"])
def test_invisible_and_unwritable_characters_are_escaped(c: str) -> None:
    assert textsafe.line(f"a{c}b") == f"a\\u{ord(c):04x}b" and textsafe.clean(c) != c
