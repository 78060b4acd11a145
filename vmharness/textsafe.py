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
untouched, as ssh passes it."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_FORMAT = "\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"  # direction marks, overrides, isolates; separators
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
