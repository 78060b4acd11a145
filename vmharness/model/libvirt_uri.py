"""libvirt connection URIs as vmharness accepts them: an allow-list, because opening a URI can run a
program as root. libvirt's URI (libvirt.org/uri.html) is `driver[+transport]://[user@][host][:port]/path
[?param=value&...]`, and several of its parts name something libvirt then runs or reads: the `ext`
transport runs the program in `command=`; the ssh transport runs `command=` instead of ssh and
`netcat=` on the far side; `socket=`, `keyfile=`, `pkipath=` and `known_hosts=` name files and
sockets; `no_verify=1` turns off the check of the server's certificate; `name=` hands another URI to
the remote daemon; `qemu:///embed?root=DIR` runs a driver inside this process on a folder.

What vmharness drives is QEMU guests, here or on a machine it also reaches with OpenSSH
(`machine.for_uri`), so it takes:
- the driver `qemu`, with the path `/system` or `/session`;
- no transport (this machine's socket, or TLS when a host is given), `unix` (this machine's socket,
  no host), `ssh` or `tls` (each with a host). `ext` runs a program and `tcp` carries everything
  unencrypted and unauthenticated: refused; `libssh`/`libssh2` read keys and host keys of their own,
  not the ~/.ssh/config that vmharness's own ssh reads for the same host: refused, use `ssh`;
- the parameters `no_tty` (0 or 1), `mode` (auto, legacy or direct: which remote daemon) and `proxy`
  (auto, netcat or native: how the remote side connects), with those values only; any other
  parameter, one given twice, a percent-escape (libvirt decodes them: `comm%61nd=` is `command=`)
  or a fragment is refused, naming it;
- a host checked as a client's `host` is (never an ssh option), and a port of ASCII digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.model.hostname import HOST

DRIVERS = ("qemu",)
PATHS = ("/system", "/session")
LOCAL, REMOTE = ("", "unix"), ("", "ssh", "tls")  # transports without a host, with one
PARAMETERS = {"no_tty": ("0", "1"), "mode": ("auto", "legacy", "direct"), "proxy": ("auto", "netcat", "native")}
WHY_NOT = {
    "command": "names a program libvirt runs", "netcat": "names a program run on the far machine",
    "socket": "names a socket", "keyfile": "names a key file", "pkipath": "names a folder of keys",
    "known_hosts": "names a file of host keys", "known_hosts_verify": "changes how host keys are checked",
    "sshauth": "changes how ssh authenticates", "no_verify": "turns off the check of the server's certificate",
    "name": "hands another URI to the remote daemon", "tls_priority": "changes the TLS ciphers",
    "root": "names a folder for an embedded driver",
}
TRANSPORT_WHY = {"ext": "runs the program named in command=", "tcp": "is unencrypted and unauthenticated",
                 "libssh": "reads keys of its own, not vmharness's ssh set-up", "libssh2": "reads keys of its "
                 "own, not vmharness's ssh set-up"}
HINT = "write qemu:///system, or qemu+ssh://[user@]host[:port]/system for a remote server (docs/run.md)"
_URI = re.compile(r"(?P<driver>[a-z][a-z0-9]*)(?:\+(?P<transport>[a-z][a-z0-9]*))?://(?P<authority>[^/?#]*)"
                  r"(?P<path>/[^?#]*)(?:\?(?P<query>[^#]*))?")
_AUTHORITY = re.compile(r"(?:(?P<user>[^@]*)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^:@\[\]]*)(?::(?P<port>[^:]*))?")


@dataclass(frozen=True)
class LibvirtUri:
    text: str
    transport: str
    user: str | None
    host: str | None
    port: int | None

    @property
    def destination(self) -> str | None:
        """The ssh destination of the machine it drives (`user@host`), None for this machine."""
        if not self.host:
            return None
        return f"{self.user}@{self.host}" if self.user is not None else self.host


def parse(value: str, where: str = "libvirt URI") -> LibvirtUri:
    """The URI taken apart, or a HarnessError naming `where` and the part refused."""
    shown = f"{where} {value[:80]!r}"

    def refuse(why: str, hint: str = HINT) -> HarnessError:
        return HarnessError(f"{shown}: {why}", hint)

    if not value.isascii() or any(c.isspace() or not c.isprintable() for c in value):
        raise refuse("holds a blank, a control character or a letter that is not ASCII")
    if "%" in value:
        escaped = next((item for item in value.partition("?")[2].split("&") if "%" in item), "")
        raise refuse((f"the parameter {escaped[:40]!r}" if escaped else "it") + " holds a percent-escape (libvirt "
                     "decodes them: comm%61nd= is command=)", "write the URI without %XX escapes")
    m = _URI.fullmatch(value)
    a = _AUTHORITY.fullmatch(m.group("authority")) if m else None
    if m is None or a is None:
        raise refuse("is malformed (not driver[+transport]://[user@][host][:port]/path)")
    driver, transport = m.group("driver"), m.group("transport") or ""
    if driver not in DRIVERS:
        raise refuse(f"the driver {driver} is not one vmharness drives (it boots QEMU guests: qemu)")
    if transport in TRANSPORT_WHY or transport not in LOCAL + REMOTE:
        raise refuse(f"the transport {transport} " + TRANSPORT_WHY.get(transport, "is not one vmharness takes "
                                                                                 "(ssh, tls or unix)"))
    if m.group("path") not in PATHS:
        raise refuse(f"the path {m.group('path')[:40]} is not /system or /session")
    user, host, port = a.group("user"), a.group("host"), a.group("port")
    if port is not None and not (re.fullmatch(r"[0-9]{1,5}", port) and 0 < int(port) < 65536):
        raise refuse(f"is malformed: the port {port[:10]!r} is not a number from 1 to 65535")
    if host and transport not in REMOTE:
        raise refuse(f"the transport {transport} connects to this machine's socket: it takes no host")
    if not host and (transport in ("ssh", "tls") or user is not None or port is not None):
        raise refuse(f"the transport {transport or 'in it'} needs a host")
    if host:
        dest = f"{user}@{host}" if user is not None else host
        if dest.startswith("-") or not HOST.fullmatch(dest):
            why = "starts with '-'" if dest.startswith("-") else "is not a host: letters, digits and '.', '_', " \
                                                                 "'-', '@', ':' only"
            raise HarnessError(f"ssh destination {dest[:80]!r} (from the host of {where} {value[:80]}) {why}",
                               "give a host name, user@host or a Host from ~/.ssh/config")
    _parameters(m.group("query"), refuse)
    return LibvirtUri(value, transport, user, host or None, int(port) if port is not None else None)


def _parameters(query: str | None, refuse: Callable[..., HarnessError]) -> None:
    """Each parameter allowed, with an allowed value, once; the error names the first that is not."""
    if query is None:
        return
    seen: set[str] = set()
    for item in query.split("&"):
        name, eq, val = item.partition("=")
        if name in WHY_NOT:
            raise refuse(f"the parameter {name}= {WHY_NOT[name]}: refused",
                         f"drop {name}=; vmharness takes only " + ", ".join(f"{p}=" for p in PARAMETERS))
        if name not in PARAMETERS:
            raise refuse(f"the parameter {name[:30] or '(empty)'}= is not one vmharness takes",
                         "vmharness takes only " + ", ".join(f"{p}= ({'/'.join(v)})" for p, v in PARAMETERS.items()))
        if not eq or val not in PARAMETERS[name] or name in seen:
            raise refuse(f"the parameter {name}= " + ("is given twice" if name in seen else
                                                       f"has the value {val[:40]!r}, not one of "
                                                       f"{', '.join(PARAMETERS[name])}"))
        seen.add(name)


def check(value: str, where: str) -> str:
    """A libvirt URI vmharness may open (see the module's text); returned unchanged."""
    parse(value, where)
    return value
