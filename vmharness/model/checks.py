"""The checks on one value of the configuration, each a `checker(value, where) -> value` that raises a
HarnessError naming `where` (the `table.key`, or the flag): the sections (model/sections.py) declare
them on their fields and `schema.table` runs them as each value is read. Every value is checked as it is
read because each one ends up somewhere that trusts it: names in paths and process tags, programs on
command lines, paths in nginx's configuration. They are public so that command-line flags (`vm up
--name`, `--out`) use the same rules as the file. The host and address checks live beside what else
reads those values (model/hostname.py, model/wire.py, model/libvirt_uri.py); the rules that span
settings are model/rules.py's."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from vmharness import digits
from vmharness.errors import HarnessError

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,62}")
_IFACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@-]{0,14}")
_CPU_FEATURE = re.compile(r"[+-][a-z0-9][a-z0-9_.-]*")


def check_name(value: str, where: str) -> str:
    """A name that becomes part of paths, domain names and process tags (instances, runs, guests):
    letters, digits, '.', '_' and '-', not starting with '-' or '.', at most 63 characters."""
    if not _NAME.fullmatch(value):
        raise HarnessError(f"{where} {value[:80]!r} is not a name: letters, digits, '.', '_' and '-', "
                           "not starting with '-' or '.', at most 63 characters", "e.g. baseline or pti-on")
    return value


def check_iface(value: str, where: str) -> str:
    """A network interface name as the kernel allows it (at most 15 characters, no '/')."""
    if not _IFACE.fullmatch(value) or value in (".", ".."):
        raise HarnessError(f"{where} {value[:80]!r} is not a network interface name", "e.g. eth0 or ens1f0")
    return value


def check_program(value: str, where: str) -> str:
    """A program run by name or path (nginx, wrk): never empty, never an option."""
    if not value or value.startswith("-"):
        raise HarnessError(f"{where} {value!r} is not a program", "a name on PATH or a path, e.g. /usr/sbin/nginx")
    return value


def check_path(value: str, where: str) -> str:
    """An optional path ("" for the default) that must not read as an option."""
    if value.startswith("-"):
        raise HarnessError(f"{where} {value[:80]!r} starts with '-'", f"write ./{value[:80]} for a relative path")
    return value


def check_url(value: str, where: str) -> str:
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme != "http" or not parts.hostname or not value.startswith("http://") \
            or any(c.isspace() for c in value) or port == 0:
        raise HarnessError(f"{where} {value[:80]!r} is not an http:// URL", "e.g. http://198.19.0.2:8080/")
    return value


def check_listen(value: str, where: str) -> str:
    """nginx's `listen` as the template writes it: PORT, ADDRESS:PORT or [IPv6]:PORT."""
    host, _, port = value.rpartition(":")
    ok = digits.is_digits(port) and len(port) <= 5 and 0 < int(port) < 65536
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            ok = False
    elif host and not re.fullmatch(r"[A-Za-z0-9._-]+", host):
        ok = False
    if not ok:
        raise HarnessError(f"{where} {value[:80]!r} is not ADDRESS:PORT", "e.g. 127.0.0.1:8080 or 8080")
    return value


def check_cpu_feature(value: str, where: str) -> str:
    if not _CPU_FEATURE.fullmatch(value):
        raise HarnessError(f"{where} {value[:80]!r} is not +name or -name",
                           'write them as QEMU\'s -cpu does, e.g. ["-md-clear", "+pcid"]')
    return value


def check_cpu_features(values: tuple[str, ...], where: str) -> tuple[str, ...]:
    """No bit named twice: "+X" and "-X" contradict each other (QEMU takes the last, silently), and a
    repeat says the list was not read through."""
    seen: dict[str, int] = {}
    for i, value in enumerate(values):
        bit = value[1:].replace("_", "-")  # QEMU reads md_clear as md-clear
        if bit in seen:
            first = values[seen[bit]]
            why = "contradicts" if first[0] != value[0] else "repeats"
            raise HarnessError(f"{where}[{i}] {value!r} {why} {where}[{seen[bit]}] {first!r}",
                               "name each bit once: + to require it, - to hide it")
        seen[bit] = i
    return values


def check_qemu_arg(value: str, where: str) -> str:
    if not value:
        raise HarnessError(f"{where} is an empty argument", "drop it")
    return value
