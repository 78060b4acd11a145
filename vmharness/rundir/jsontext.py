"""The JSON text of a run folder (records.jsonl's lines, manifest.json), read as it was written or refused.

Python's json.loads takes an object that gives a key twice and keeps the last value silently; another
reader (jq, a colleague's script) may keep the first. A record `{"ok": false, ..., "ok": true}` would then
be a failure to one reader and a measurement to the other: such an object is refused here, naming the key
(store.py names the file and line). And a number no figure can be (NaN, Infinity, a float beyond 2**63)
is noted while parsing, so that only such a record is walked number by number (rundir/record_check.py)."""

from __future__ import annotations

import json
from typing import Any

MOST = 2**63  # beyond any counter or figure the harness writes (record_check.MOST)


class Twice(ValueError):
    """A JSON object that gives a key twice."""


def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of JSON text (json.loads' object_pairs_hook), refused when it gives a key twice."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise Twice(f"it gives the key {json.dumps(key)[:60]} twice (JSON readers keep one of the two "
                            "silently)")
            seen.add(key)
    return out


def value(text: str) -> Any:
    """A whole JSON text's value (a manifest), a key given twice refused (Twice)."""
    return json.loads(text, object_pairs_hook=unique)


def line(text: str) -> tuple[Any, bool]:
    """A line's JSON value, and whether it holds a number no figure can be (NaN, Infinity, a float beyond
    2**63): only such a record is walked number by number (a histogram makes one thousands of numbers
    long). An integer that large is caught where it would count: no range in record_check.RULES reaches
    it. A key given twice is refused (Twice)."""
    odd: list[str] = []

    def constant(text: str) -> float:
        odd.append(text)
        return float(text)

    def floating(text: str) -> float:
        x = float(text)
        if not abs(x) <= MOST:
            odd.append(text)
        return x

    return json.loads(text, parse_constant=constant, parse_float=floating, object_pairs_hook=unique), bool(odd)
