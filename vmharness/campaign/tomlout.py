"""A configuration table written back as TOML, for `vmharness bench CELL.toml` to read: the tables of a
configuration only (tables, arrays of tables, strings, numbers, booleans and arrays of those), every
string a JSON string (a TOML basic string is its superset for what a checked value may hold), and the
text read back with tomllib before it is used, so that a value that would not survive is an error here
rather than another configuration there."""

from __future__ import annotations

import json
import math
import tomllib
from typing import Any

from vmharness.errors import HarnessError


def _value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise HarnessError(f"{where} is {v}: not a number a configuration holds", "give a finite number")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x, where) for x in v) + "]"
    raise HarnessError(f"{where} is a {type(v).__name__}: not a value a cell's configuration can hold",
                       "give a string, a number, a boolean or a list of those")


def _key(k: str) -> str:
    return json.dumps(k, ensure_ascii=False)


def _is_tables(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _emit(table: dict[str, Any], path: list[str], out: list[str]) -> None:
    for k, v in table.items():
        if not isinstance(v, dict) and not _is_tables(v):
            out.append(f"{_key(k)} = {_value(v, '.'.join([*path, k]))}")
    for k, v in table.items():
        name = ".".join(_key(p) for p in [*path, k])
        if isinstance(v, dict):
            out.append(f"\n[{name}]")
            _emit(v, [*path, k], out)
        elif _is_tables(v):
            for item in v:
                out.append(f"\n[[{name}]]")
                _emit(item, [*path, k], out)


def dumps(table: dict[str, Any]) -> str:
    """`table` as TOML text that reads back to `table` (checked)."""
    out: list[str] = []
    _emit(table, [], out)
    text = "\n".join(out).lstrip("\n") + "\n"
    if tomllib.loads(text) != table:
        raise HarnessError("a cell's configuration does not read back as written",
                           "a value nests tables inside arrays of values: write it as the base file does")
    return text
