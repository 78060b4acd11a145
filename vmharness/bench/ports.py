"""Who holds a TCP port a server could not listen on, so that the error names the port and the process
instead of quoting nginx's log. Read with `ss -Hltnp` on the server's machine (iproute2: the guest
image has it, and so does any Debian host); what it cannot tell (no ss, a process of another user
seen without root) leaves the holder unnamed, never the error unsaid."""

from __future__ import annotations

import re

from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.system.machine import Machine

# nginx: [emerg] bind() to 127.0.0.1:8080 failed (98: Address already in use)
_IN_USE = re.compile(r"bind\(\) to (\S+) failed \(98: ")
_USER = re.compile(r'\("([^"]{0,64})",pid=([0-9]{1,9}),')


def taken(log: str) -> str | None:
    """The ADDRESS:PORT nginx's start-up log says is in use, if it says so."""
    m = _IN_USE.search(log)
    return m.group(1) if m else None


def holders(machine: Machine, port: int) -> list[str]:
    """`pid N (name)` of each process listening on TCP `port` on the machine, as ss shows them."""
    try:
        res = machine.run(["ss", "-Hltnp", f"sport = :{port}"], timeout=15, check=False)
    except HarnessError:  # no ss there
        return []
    found = [(pid, name) for name, pid in _USER.findall(res.stdout) if is_digits(pid)] if res.ok else []
    shown = [f"pid {pid} ({''.join(c for c in name if c.isprintable())})" for pid, name in found]
    return list(dict.fromkeys(shown))


def in_use_error(machine: Machine, address: str, key: str) -> HarnessError:
    """The error for a server that could not listen on `address` (ADDRESS:PORT, from nginx's log):
    the port, the machine and who holds it; `key` names the setting the port came from."""
    port_text = address.rpartition(":")[2]
    port = int(port_text) if is_digits(port_text) and len(port_text) <= 5 else 0
    who = holders(machine, port) if port else []
    held = f"held by {', '.join(who)}" if who else "held by another process (ss could not tell which)"
    return HarnessError(f"port {port_text} ({address}) on {machine.label} is taken: {held}",
                        f"stop that process, or give the server a free port ({key})")
