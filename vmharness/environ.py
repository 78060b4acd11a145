"""The environment variables vmharness reads, each read here: a value is an input like a flag.

A value with a control character in it (a trailing newline from `export X="$(cat file)"` gone wrong,
an escape sequence) is refused, naming the variable, rather than used: it would end up in a path, in
ssh's argv or on the terminal, where `snap\\n` is not the folder `snap` and an error line naming it
breaks in two. Variables that only the harness's own wrappers set (VMHARNESS_LIBVIRTD) are parsed
strictly where they are read; they come through here all the same."""

from __future__ import annotations

import os
import re

from vmharness.errors import HarnessError

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: what a terminal may act on


def get(name: str, default: str | None = None) -> str | None:
    """The variable's value (or `default` when it is unset), refused if it holds a control character."""
    value = os.environ.get(name)
    if value is None:
        return default
    if CONTROL.search(value):
        raise HarnessError(f"environment variable {name} holds a control character ({value[:60]!r})",
                           f"set it on one line, without a trailing newline: export {name}=VALUE "
                           f"(or unset {name})")
    return value
