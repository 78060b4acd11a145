"""What a run's manifest may hold, checked where it is read back (rundir/store.py): names no longer than
a name, and no string longer than the harness ever writes.

A manifest is read long after it was written, perhaps handed over by a colleague: within its 64 MiB cap
an instance's name, a switch's, a kernel command line or any other value could be megabytes long. Such a
value is no name and no command line; carried into every form of the report it would be printed whole
in a table's column and a page's heading. So an instance's or a switch's name is at most as long as the
configuration allows (model/checks.py: 63 characters; what it holds is escaped where it is shown,
textsafe.py), and any other string at most MAX_TEXT characters (a kernel command line is at most 4 KiB
on every architecture Linux runs on, a sysfs value a page); the fault names the key, as
`config.instance[1].name`. The walk is one pass over the values,
iterative (a manifest nested as deep as the JSON parser allows is not a recursion error here)."""

from __future__ import annotations

from typing import Any

MAX_NAME = 63  # characters in a name: the configuration's (model/checks.py check_name)
MAX_TEXT = 64 << 10  # characters in any one string (a key or a value) of a manifest
_SHOWN = 40  # characters of a key shown in a fault


def _names(data: dict[str, Any]) -> list[tuple[str, object]]:
    """The names a manifest holds, each with its key: the instances', the study's switches', the control's
    and the instances' facts' (those the report matches and prints)."""
    config = data.get("config", {})
    config = config if isinstance(config, dict) else {}
    out: list[tuple[str, object]] = [(f"config.instance[{i}].name", inst.get("name"))
                                     for i, inst in enumerate(config.get("instance", []))]
    study = config.get("study")
    for key in ("switches", "host_switches"):
        if isinstance(study, dict) and isinstance(study.get(key), list):
            out += [(f"config.study.{key}[{i}]", s) for i, s in enumerate(study[key])]
    control = config.get("control")
    if isinstance(control, dict) and control.get("name") is not None:
        out.append(("config.control.name", control["name"]))
    facts = data.get("instances")
    if isinstance(facts, dict):
        out += [(f"instances key {str(k)[:_SHOWN]!r}", k) for k in facts]
    return out


def fault(data: dict[str, Any]) -> str | None:
    """What makes the manifest `data` (its instances already known to be named objects) one the harness
    did not write, naming the key; None when nothing does."""
    for key, name in _names(data):
        if isinstance(name, str) and len(name) > MAX_NAME:
            return f"holds {key} of {len(name):,} characters, which is not a name (at most {MAX_NAME} characters)"
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                if len(k) > MAX_TEXT:
                    return f"holds a key of {len(k):,} characters in {where or 'its top level'} (at most {MAX_TEXT:,})"
                stack.append((f"{where}.{k}" if where else k, v))
        elif isinstance(value, list):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, str) and len(value) > MAX_TEXT:
            return f"holds {where}, a string of {len(value):,} characters (at most {MAX_TEXT:,} in a run's manifest)"
    return None
