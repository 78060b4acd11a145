"""Numbers read from text (a flag, a host file, a tool's output) in ASCII digits only, in one place.

Python's `int()` also reads full-width and other Unicode digits (`int("１２") == 12`), `_` between
digits (`"1_000"`), a sign and blanks around (`" +12\\n"`), and `str.isdigit()` says yes to `"²"`, which
`int()` then refuses with a traceback. No kernel file, tool or careful user writes any of these, and a
host tree or a flag that holds one is damaged or hostile: it is read as no number at all, so its
reader names it instead of acting on a value nobody wrote. A leaf module: every layer may use it."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

_DECIMAL = re.compile(r"-?[0-9]+")
_HEX = re.compile(r"(?:0[xX])?[0-9a-fA-F]+")
_REAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
MAX_DIGITS = 40  # longer is no count, size or id anything here reads (and int() of it costs time)


def is_digits(text: str) -> bool:
    """One or more ASCII digits and nothing else (what `str.isdigit` should have meant)."""
    return text.isascii() and text.isdigit()


def integer(text: str, *, signed: bool = False) -> int | None:
    """The whole number `text` spells in ASCII decimal digits (`-` first when `signed`), or None."""
    if len(text) > MAX_DIGITS or not _DECIMAL.fullmatch(text) or (text.startswith("-") and not signed):
        return None
    return int(text, 10)


def hexadecimal(text: str, *, prefix: bool = True) -> int | None:
    """The number `text` spells in ASCII hex digits (`8086`; `0x020000` unless `prefix` is False), or None."""
    if len(text) > MAX_DIGITS or not _HEX.fullmatch(text) or (not prefix and text[:2] in ("0x", "0X")):
        return None
    return int(text, 16)


def real(text: str) -> float | None:
    """A decimal number in ASCII (`1`, `0.5`, `-2`, `1e3`), or None; `inf` and `nan` are no numbers."""
    if len(text) > MAX_DIGITS or not _REAL.fullmatch(text):
        return None
    return float(text)


def require(text: str, where: str, *, signed: bool = False, hint: str = "") -> int:
    """`integer`, or a HarnessError naming `where` (a file, a flag) and what it holds."""
    value = integer(text, signed=signed)
    if value is None:
        raise HarnessError(f"{where} holds {text[:40]!r}, not a whole number in ASCII digits",
                           hint or "the host root is damaged, or this kernel writes something vmharness does "
                                   "not know")
    return value
