"""Reading a TOML (or manifest JSON) table into a frozen dataclass: the dataclass is the whole schema.
A field's type says what a value may be (`Literal` lists the choices), its metadata how far a number
may go (`bounded`) or which checker a string passes (`checked`); an unknown key, a wrong type or a bad
value is one error naming the key. The experiment configuration and the tuning profiles both read
through here, so this module imports nothing of the harness but its error type.

Rules that hold for every value, whatever its field: a float is finite (TOML allows `inf` and `nan`),
an int without bounds fits 64 bits, a string holds no control character and is at most `MAX_TEXT`
characters, since each may end up in argv, a path or a file the harness writes."""

from __future__ import annotations

import dataclasses
import math
import re
import types
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from vmharness.errors import HarnessError

T = TypeVar("T")
D = TypeVar("D")

Check = Callable[[str, str], str]  # (value, where) -> the value, or HarnessError naming `where`
# (values, where) -> the values: a rule on a whole array of strings, once each string passed its Check
CheckAll = Callable[[tuple[str, ...], str], tuple[str, ...]]
MAX_TEXT = 4096
_INT64 = (-(1 << 63), (1 << 63) - 1)
HINT = "docs/bench.md, docs/run.md and docs/tuning.md list every setting"


def bounded(default: D, low: float, high: float) -> D:
    """A number field that must lie in [low, high] (both included)."""
    result: D = dataclasses.field(default=default, metadata={"bounds": (low, high)})
    return result


def checked(check: Check, whole: CheckAll | None = None, **field_args: Any) -> Any:
    """A string field (or each string of a tuple, or each key of a table) that `check` must accept, and
    for a tuple the rule `whole` on all of them together (an option and its value, a name given twice);
    `field_args` go to dataclasses.field (default=..., default_factory=...)."""
    return dataclasses.field(metadata={"check": check, "whole": whole}, **field_args)


def choices(kind: Any) -> tuple[str, ...]:
    """The strings a `Literal[...]` type allows, in order (for argparse `choices=` too)."""
    return tuple(get_args(kind))


def _say_choices(options: tuple[Any, ...]) -> str:
    words = [str(o) for o in options]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def key(where: str, name: str) -> str:
    """`config.sweep` + `wait` -> `config.sweep.wait`; a where ending in ':' (a file) takes a space."""
    return f"{where} {name}" if where.endswith(":") else f"{where}.{name}"


def _wrong_type(where: str, kind: Any, value: Any) -> HarnessError:
    want = kind.__name__ if isinstance(kind, type) else str(kind)
    return HarnessError(f"{where} must be {want}, not {type(value).__name__} ({_short(value)})", HINT)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(where: str, value: str, check: Check | None) -> str:
    if len(value) > MAX_TEXT:
        raise HarnessError(f"{where} is {len(value)} characters long (at most {MAX_TEXT})", "shorten it")
    if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise HarnessError(f"{where} holds a control character ({_short(value)})",
                           "write it on one line, without escapes such as \\n or \\u0000")
    return check(value, where) if check else value


def _number(where: str, value: int | float, bounds: tuple[Any, Any] | None) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise HarnessError(f"{where} must be a finite number, not {value}", "write a plain number, e.g. 1.5")
    low, high = bounds or (_INT64 if isinstance(value, int) else (-math.inf, math.inf))
    if not low <= value <= high:
        raise HarnessError(f"{where} must be between {low} and {high}, not {_short(value)}", HINT)


def value(where: str, kind: Any, data: Any, meta: Any = None) -> Any:
    """`data` checked against the type `kind` (and the field metadata `meta`), converted as needed."""
    meta = meta or {}
    origin = get_origin(kind)
    if origin is Literal:
        options = get_args(kind)
        if not isinstance(data, str) or data not in options:
            raise HarnessError(f"{where} must be {_say_choices(options)}, not {_short(data)}", HINT)
        return data
    if origin in (Union, types.UnionType):
        kinds = [a for a in get_args(kind) if a is not type(None)]
        match = next((a for a in kinds if type(data) is a or (a is float and type(data) is int)), None)
        if match is None:
            raise HarnessError(f"{where} must be {' or '.join(a.__name__ for a in kinds)}, not "
                               f"{type(data).__name__} ({_short(data)})", HINT)
        return value(where, match, data, meta)
    if kind is float and type(data) is int:
        data = float(data)
    if kind in (str, int, float, bool):
        if type(data) is not kind:
            raise _wrong_type(where, kind, data)
        if kind in (int, float):
            _number(where, data, meta.get("bounds"))
        if kind is str:
            return _text(where, data, meta.get("check"))
        return data
    if origin is tuple and get_args(kind)[0] is str:
        if not isinstance(data, list | tuple) or not all(isinstance(v, str) for v in data):
            raise HarnessError(f"{where} must be an array of strings", "e.g. [\"eth0\"]")
        texts = tuple(_text(f"{where}[{i}]", v, meta.get("check")) for i, v in enumerate(data))
        whole = meta.get("whole")
        return whole(texts, where) if whole else texts
    if origin is tuple and get_args(kind)[0] is int:
        if not isinstance(data, list | tuple) or not all(type(v) is int for v in data):
            raise HarnessError(f"{where} must be an array of whole numbers", "e.g. [25, 50]")
        for i, v in enumerate(data):
            _number(f"{where}[{i}]", v, meta.get("bounds"))
        return tuple(data)
    if origin is tuple:
        item = get_args(kind)[0]
        if not isinstance(data, list | tuple) or not data:
            raise HarnessError(f"{where} must be a non-empty array of tables ([[{where.removeprefix('config.')}]])",
                               HINT)
        return tuple(table(f"{where}[{i}]", item, v) for i, v in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise HarnessError(f"{where} must be a table of name = value", HINT)
        item = get_args(kind)[1]
        return {_text(f"{where} key", k, meta.get("check")): value(key(where, k), item, v) for k, v in data.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return table(where, kind, data)
    if callable(reader := getattr(kind, "from_table", None)):  # a type that reads its own table
        return reader(where, data)
    raise AssertionError(f"no rule for {kind}")  # a schema mistake, not the user's


def table(where: str, cls: type[T], data: Any) -> T:
    """An instance of the dataclass `cls` from the table `data`; `where` names the table in errors."""
    if not isinstance(data, dict):
        raise HarnessError(f"{where} must be a table", HINT)
    hints = get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = {f.name for f in fields}
    unknown = sorted(str(k) for k in set(data) - names)
    if unknown:
        shown = unknown[0] if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", unknown[0]) else _short(unknown[0])
        raise HarnessError(f"unknown setting {key(where, shown)}",
                           f"known in {where.rstrip(':')}: {', '.join(sorted(names))}")
    kwargs = {}
    for f in fields:
        if f.name in data:
            kwargs[f.name] = value(key(where, f.name), hints[f.name], data[f.name], f.metadata)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise HarnessError(f"{key(where, f.name)} is required", HINT)
    return cls(**kwargs)
