"""What may name another machine in a value a user gives (a client's or the server's `host`, the host
of a libvirt URI): `local`, or an ssh destination, [user@]host or a Host from ~/.ssh/config. Never
an ssh option (`-oProxyCommand=...` runs a command here), never a blank or a control character. A
leaf, so that the configuration and the libvirt URI rules check hosts alike."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@:\[\]-]{0,252}")


def check_host(value: str, where: str) -> str:
    """`local` or an ssh destination ([user@]host, or a name from ~/.ssh/config): never an ssh option."""
    if not HOST.fullmatch(value):
        raise HarnessError(f"{where} {value[:80]!r} is not a host: letters, digits and '.', '_', '-', '@', ':' "
                           "only, not starting with '-'", "write local, or an ssh name such as user@server1")
    return value
