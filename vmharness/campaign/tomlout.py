"""A configuration table written back as TOML, for `vmharness bench CELL.toml` to read: tomli-w writes
it, and the text is read back with tomllib before it is used, so that a value that would not survive
(a NaN, a table inside an array of values) is an error here rather than another configuration there."""

from __future__ import annotations

import math
import tomllib
from typing import Any

import tomli_w

from vmharness.errors import HarnessError


def _finite(v: Any, where: str) -> None:
    """No NaN or infinity anywhere: TOML can write them, no configuration key takes them."""
    if isinstance(v, float) and not math.isfinite(v):
        raise HarnessError(f"{where} is {v}: not a number a configuration holds", "give a finite number")
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        _finite(x, f"{where}.{k}" if where else str(k))


def dumps(table: dict[str, Any]) -> str:
    """`table` as TOML text that reads back to `table` (checked)."""
    _finite(table, "")
    try:
        text = tomli_w.dumps(table)
    except TypeError as exc:
        raise HarnessError(f"a cell's configuration holds a value TOML cannot: {exc}",
                           "give a string, a number, a boolean or a list of those") from None
    if tomllib.loads(text) != table:
        raise HarnessError("a cell's configuration does not read back as written",
                           "a value nests tables inside arrays of values: write it as the base file does")
    return text
