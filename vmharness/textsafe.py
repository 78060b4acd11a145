"""Text that came from elsewhere, printed: its control characters escaped. A run folder's manifest or
records, a host tree's driver and interface names, a value echoed in an error may hold anything: an ESC
sequence that clears the screen or rewrites the window's title, a CR or a backspace that hides what came
before it on the line, a BEL, a C1 control (U+009B is a CSI of its own), a bidirectional override that
shows text in another order than it is. None of them reaches a terminal or a report file raw: each is
written as `\\xNN` (or `\\uNNNN`).

Two places do it, so that no caller has to remember: `terminal()` wraps stdout and stderr for the whole
command (cli.main), which escapes everything but newline and tab; and the renderers of one line (a table
cell, a warning, a progress line, the report's files) use `line`, which escapes those too, so that a
name cannot add a line of its own. A child's output that the user asked for (`vm exec`) goes to `raw`,
untouched, as ssh passes it.

A run folder someone uploaded is hostile data in every form its report takes, so each form has one
function here that every renderer of that form uses (docs/safety.md, "Untrusted text in every output
form"): `line` for the terminal's text, `markdown` for a Markdown document, `csv_cell` for a CSV's
string cells, `html` for HTML and SVG, `latex` for LaTeX, `json_text` for JSON. The figures' labels are `line`d, and
matplotlib is told not to read them as mathtext (plots.py); a flame graph's frames are `line`d
before inferno reads them (flame.py)."""

from __future__ import annotations

import html as _html
import json
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

# direction marks, overrides, isolates (the bidirectional controls of CVE-2021-42574), characters of no
# width that make one name look like another, line and paragraph separators; then halves of a UTF-16
# pair standing alone (JSON's "\\ud800" reads as one: no encoding writes it, so printing it would fail)
# and the two non-characters XML refuses
_FORMAT = "\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff"
_CONTROL = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_FORMAT}]|\r(?!\n)")  # CR LF ends a line (CSV)
_CONTROL_OR_BREAK = re.compile(f"[\x00-\x1f\x7f-\x9f{_FORMAT}]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: str) -> str:
    """Whole output: every control character escaped but newline, tab, and a CR that ends a line."""
    return _CONTROL.sub(_escape, text)


def line(text: str) -> str:
    """One line of output: every control character escaped, newline and tab too."""
    return _CONTROL_OR_BREAK.sub(_escape, text)


# Markdown: HTML's characters and Markdown's own, as character references. A reference is the one escape
# that reads as its character in text and as itself in a code span (a backslash is literal there, and
# would not keep a backtick from ending the span). A run of `_` only where it could close emphasis (one
# followed by a letter or digit cannot: an identifier's `_x`, `a_b` and `__x` stay), `]` only where it
# would make a link of `[...]`, a backslash only where it would escape what follows it (`line`'s own
# `\x1b` stays as the terminal's). A name that could be an instance's reads as it is.
_MD = str.maketrans({c: f"&#{ord(c)};" for c in "`|*~$"} | {"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_MD_INLINE = re.compile(r"_++(?![^\W_])|\](?=[(\[])|\\(?=[!-/:-@\[-`{-~]|$)")
# what starts a block at a line's start: a heading, a link's definition, a list item, a thematic break
# or setext underline
_MD_BLOCK = re.compile(r"^(\s*)(?:([#\[=]|-(?=[\s-]|$)|\+(?=\s|$))|(\d{1,9})([.)])(?=\s|$))")
# a cell a spreadsheet would run as a formula begins with one of these (OWASP's "CSV injection"; tab and
# CR are escaped by `line` before they could begin one, the full-width forms are read as the others)
_FORMULA = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def _ref(m: re.Match[str]) -> str:
    return "".join(f"&#{ord(c)};" for c in m.group())


def _md_block(m: re.Match[str]) -> str:
    mark = m.group(2) or m.group(4)
    return f"{m.group(1)}{m.group(3) or ''}&#{ord(mark)};"


def markdown(text: str) -> str:
    """One line of text in a Markdown document: `line`, then nothing in it markup. No tag, link, image,
    code span, emphasis, math or table cell break; at a line's start no heading, list item or quote."""
    return _MD_BLOCK.sub(_md_block, _MD_INLINE.sub(_ref, line(text).translate(_MD)), count=1)


def csv_cell(text: str) -> str:
    """A string cell of a CSV (`line`, the csv module quotes the rest): one a spreadsheet would run as
    a formula is written as text, after a `'`. Numbers are not strings: a negative one stays a number."""
    text = line(text)
    return "'" + text if text.startswith(_FORMULA) else text


def html(text: str) -> str:
    """Text in HTML or SVG: `line`, then HTML-escaped (quotes too: it may stand in an attribute). No
    character XML refuses is left, so an SVG stays a well-formed document."""
    return _html.escape(line(text))


# LaTeX: every character TeX reads as markup (the ten specials, and `[`, `]`, `*` that a row's end `\\`
# would take as its options) as a command or in braces, which make nothing but the character; `<`, `>`,
# `|` as the characters they are (the default font draws others there), `"` as the closing quote it
# draws; a ligature's pair (`--`, ``` `` ```, `,,`, `?``) kept apart. No backslash of the text is left, so
# no command of it runs: not `\input`, not `\write18`.
_TEX = str.maketrans({"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
                      "%": r"\%", "_": r"\_", "^": r"\textasciicircum{}", "~": r"\textasciitilde{}",
                      "[": "{[}", "]": "{]}", "*": "{*}", "<": r"\textless{}", ">": r"\textgreater{}",
                      "|": r"\textbar{}", '"': r"\textquotedblright{}", "\u00b1": r"\ensuremath{\pm}"})
_TEX_PAIR = re.compile(r"([-`',?!])(?=[-`',])")
_TEX_WIDE = re.compile(r"[^\x00-\x7f\u00b1]")  # no font of a default document draws it: `\uNNNN` instead


def latex(text: str) -> str:
    """Text in a LaTeX document: `line`, then every character that is not printable ASCII (but `±`) as
    `\\uNNNN`, and nothing of it markup: it sets exactly the characters it holds, in any paragraph, a
    table's cell or a macro's body."""
    text = _TEX_WIDE.sub(lambda m: f"\\u{ord(m.group()):04x}", line(text))
    return _TEX_PAIR.sub(r"\1{}", text.translate(_TEX))


def json_text(value: object, indent: int | None = 2, sort: bool = True) -> str:
    """JSON of the report: every character that is not printable ASCII as `\\uXXXX` (ensure_ascii), so a
    control or direction character reaches no terminal or page raw, and a lone surrogate encodes."""
    return json.dumps(value, indent=indent, sort_keys=sort, ensure_ascii=True)


class SafeStream:
    """A text stream that escapes what is written to it (`clean`), and is the stream under it otherwise."""

    def __init__(self, under: Any) -> None:
        self.under = under

    def write(self, text: str) -> int:
        self.under.write(clean(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for text in lines:
            self.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.under, name)


def raw(stream: Any) -> TextIO:
    """The stream under a SafeStream (for what is passed through untouched, or drawn by rich)."""
    under: TextIO = stream.under if isinstance(stream, SafeStream) else stream
    return under


@contextmanager
def terminal(keep: bool = False) -> Iterator[None]:
    """stdout and stderr escaped for the block; `keep`: they stay so (the program ends after it)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(raw(out)), SafeStream(raw(err))
    try:
        yield
    finally:
        if not keep:
            sys.stdout, sys.stderr = out, err
