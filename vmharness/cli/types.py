"""Number flags checked as argparse reads them: a value outside its range, `inf` or `nan`, or one not
in plain ASCII digits (`１２`, `1_000`, ` 12`: `int()` and `float()` would read them) is one
`error: argument --FLAG: ...` line with exit 2 (the parser's error path), before any work starts."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from vmharness import digits

DAY = 86400.0


def whole(low: int, high: int) -> Callable[[str], int]:
    """A whole number in [low, high]."""
    def parse(text: str) -> int:
        number = digits.integer(text, signed=True)
        if number is None:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number in ASCII digits")
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{number} is not between {low} and {high}")
        return number
    parse.__name__ = "whole number"
    return parse


def seconds(low: float = 0.0, high: float = DAY) -> Callable[[str], float]:
    """A finite number of seconds in [low, high] (`inf` and `nan` are refused)."""
    def parse(text: str) -> float:
        number = digits.real(text)
        if number is None:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds in ASCII digits")
        if not math.isfinite(number) or not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{text} is not between {low:g} and {high:g} seconds")
        return number
    parse.__name__ = "seconds"
    return parse
