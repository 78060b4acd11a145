"""Which network interfaces the host is using: those holding a route or an address, directly or
through their bond/bridge master. Read from procfs text only, so a snapshot answers the same.

This is the guard that keeps `host-prepare` from unbinding the NIC that carries the SSH connection,
so it fails closed: when the routing tables, the address list or an interface's link state cannot be
read or parsed, every interface is reported as possibly in use, with the reason, and a rebind needs
--force. IPv6 files may be absent together (a kernel without IPv6), not one without the other.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass, field

from vmharness.host.root import HostRoot

_LINK_LOCAL6 = ipaddress.ip_network("fe80::/10")
_MULTICAST6 = ipaddress.ip_network("ff00::/8")
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")  # RFC 2863


@dataclass(frozen=True)
class Route4:
    iface: str
    network: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address

    @property
    def is_default(self) -> bool:
        return self.network.prefixlen == 0


@dataclass
class Held:
    """What each interface holds ("default route", "address 10.0.0.5"), and what could not be read
    (then any interface may hold something nobody can see)."""

    by_iface: dict[str, list[str]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)

    def add(self, iface: str, what: str) -> None:
        if iface == "lo":
            return
        items = self.by_iface.setdefault(iface, [])
        if what not in items:
            items.append(what)


class _Garbled(ValueError):
    pass


def _le_ip(hex_text: str) -> ipaddress.IPv4Address:
    """/proc/net/route prints addresses as host-order (little-endian on x86) hex."""
    if len(hex_text) != 8:
        raise _Garbled(hex_text)
    return ipaddress.IPv4Address(socket.inet_ntoa(struct.pack("<I", int(hex_text, 16))))


def _lines(root: HostRoot, path: str, held: Held, *, optional: bool = False) -> list[tuple[int, str]]:
    """The numbered lines of a procfs table; a missing file is noted as unreadable unless optional."""
    text = root.read_optional(path)
    if text is None:
        if not optional:
            held.unreadable.append(f"{path} cannot be read")
        return []
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _garbled(held: Held, path: str, n: int, line: str) -> None:
    held.unreadable.append(f"{path} line {n} is garbled: {line.strip()[:60]!r}")


def routes4(root: HostRoot, held: Held | None = None) -> list[Route4]:
    """The IPv4 routes; what cannot be read or parsed is noted in `held`."""
    held = held if held is not None else Held()
    path = "/proc/net/route"
    lines = _lines(root, path, held)
    if lines and not lines[0][1].startswith("Iface"):
        _garbled(held, path, *lines[0])
        return []
    if not lines and root.exists(path):
        held.unreadable.append(f"{path} is empty (it has a header line even without routes)")
    out = []
    for n, line in lines[1:]:
        cols = line.split()
        try:
            if len(cols) < 8:
                raise _Garbled(line)
            dest, mask = _le_ip(cols[1]), _le_ip(cols[7])
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
            out.append(Route4(cols[0], net, _le_ip(cols[2])))
        except ValueError:
            _garbled(held, path, n, line)
    return out


def local_addrs4(root: HostRoot, held: Held | None = None) -> list[ipaddress.IPv4Address]:
    """Addresses the host owns: the `/32 host LOCAL` leaves of the local table in fib_trie."""
    held = held if held is not None else Held()
    path = "/proc/net/fib_trie"
    addrs: list[ipaddress.IPv4Address] = []
    last_leaf, leaf_line = "", 0
    for n, line in _lines(root, path, held):
        stripped = line.strip()
        if stripped.startswith("|--") or stripped.startswith("+--"):
            last_leaf, leaf_line = (stripped[3:].split() or [""])[0], n
        elif stripped.startswith("/32 host LOCAL") and last_leaf:
            try:
                addr = ipaddress.IPv4Address(last_leaf.split("/")[0])
            except ValueError:
                _garbled(held, path, leaf_line, last_leaf)
                continue
            if not addr.is_loopback and addr not in addrs:
                addrs.append(addr)
    return addrs


def _hex6(text: str) -> ipaddress.IPv6Address:
    if len(text) != 32:
        raise _Garbled(text)
    return ipaddress.IPv6Address(bytes.fromhex(text))


def _ipv6(root: HostRoot, held: Held) -> None:
    addrs, routes = "/proc/net/if_inet6", "/proc/net/ipv6_route"
    without_ipv6 = not root.exists(addrs) and not root.exists(routes)
    for n, line in _lines(root, addrs, held, optional=without_ipv6):
        cols = line.split()
        try:
            if len(cols) != 6:
                raise _Garbled(line)
            addr6 = _hex6(cols[0])
        except ValueError:
            _garbled(held, addrs, n, line)
            continue
        if addr6 not in _LINK_LOCAL6 and not addr6.is_loopback:
            held.add(cols[5], f"address {addr6}")
    for n, line in _lines(root, routes, held, optional=without_ipv6):
        cols = line.split()
        try:
            if len(cols) != 10:
                raise _Garbled(line)
            dest, plen, iface = _hex6(cols[0]), int(cols[1], 16), cols[9]
        except ValueError:
            _garbled(held, routes, n, line)
            continue
        if dest in _LINK_LOCAL6 or dest in _MULTICAST6 or plen == 128:
            continue  # link-local, multicast, and the host's own addresses (counted above)
        held.add(iface, "default route (IPv6)" if plen == 0 else f"route {dest}/{plen}")


def reasons(root: HostRoot) -> Held:
    """For each interface that holds something, what it holds. Link-local and multicast IPv6 entries
    are left out: every interface that is up has them."""
    held = Held()
    r4 = routes4(root, held)
    for r in r4:
        held.add(r.iface, "default route" if r.is_default else f"route {r.network}")
    # fib_trie does not say which interface owns an address: the interface of the most specific
    # non-default route that contains it does (the kernel adds one for every address with a prefix).
    for addr in local_addrs4(root, held):
        best = max(
            (r for r in r4 if not r.is_default and addr in r.network),
            key=lambda r: r.network.prefixlen,
            default=None,
        )
        if best is not None:
            held.add(best.iface, f"address {addr}")
    _ipv6(root, held)
    return held


def masters(root: HostRoot, iface: str) -> list[str]:
    """The chain of masters above an interface: eth0 -> bond0 -> br0."""
    chain: list[str] = []
    name: str | None = iface
    while name is not None and len(chain) < 8:
        name = root.readlink_name(f"/sys/class/net/{name}/master")
        if name is not None and name not in chain:
            chain.append(name)
    return chain


def _link_state_unknown(root: HostRoot, iface: str) -> str | None:
    path = f"/sys/class/net/{iface}/operstate"
    state = root.read_optional(path)
    if state is None:
        return f"{path} cannot be read"
    if state not in OPERSTATES:
        return f"{path} holds {state[:40]!r}"
    return None


def active_reason(root: HostRoot, iface: str, held: Held) -> str | None:
    """Why the host uses (or may use) this interface ("default route", "via bond0: default route",
    "routes or addresses that cannot be checked (...)"), or None when it surely does not."""
    chain = masters(root, iface)
    if held.by_iface.get(iface):
        return ", ".join(held.by_iface[iface])
    for m in chain:
        if held.by_iface.get(m):
            return f"via {m}: " + ", ".join(held.by_iface[m])
    unknown = held.unreadable + [why for name in [iface, *chain] if (why := _link_state_unknown(root, name))]
    if unknown:
        return "routes or addresses that cannot be checked (" + "; ".join(unknown) + ")"
    return None
