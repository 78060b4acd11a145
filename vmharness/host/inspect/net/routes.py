"""The host's routes and addresses, read from procfs text (/proc/net/route, fib_trie, if_inet6,
ipv6_route) through HostRoot, so a snapshot answers the same. What cannot be read or parsed is noted in
the `Held` record, and the routes and addresses that count are added to it. IPv6 files may be absent
together (a kernel without IPv6), not one without the other."""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

from vmharness.digits import hexadecimal, integer
from vmharness.environ import CONTROL
from vmharness.host.inspect.net.held import Held
from vmharness.system.root import HostRoot

_LINK_LOCAL6 = ipaddress.ip_network("fe80::/10")
_MULTICAST6 = ipaddress.ip_network("ff00::/8")
RTF_REJECT = 0x0200  # an unreachable/prohibit route: it carries nothing


@dataclass(frozen=True)
class Route4:
    iface: str
    network: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address
    metric: int = 0

    @property
    def is_default(self) -> bool:
        return self.network.prefixlen == 0


@dataclass(frozen=True)
class Route6:
    iface: str
    network: ipaddress.IPv6Network
    metric: int
    flags: int


class _Garbled(ValueError):
    pass


def _le_ip(hex_text: str) -> ipaddress.IPv4Address:
    """/proc/net/route prints addresses as host-order (little-endian on x86) hex."""
    value = hexadecimal(hex_text, prefix=False) if len(hex_text) == 8 else None
    if value is None:
        raise _Garbled(hex_text)
    return ipaddress.IPv4Address(socket.inet_ntoa(struct.pack("<I", value)))


def _lines(root: HostRoot, path: str, held: Held, *, optional: bool = False) -> list[tuple[int, str]]:
    """The numbered lines of a procfs table; a missing file is noted as unreadable unless optional."""
    text = root.read_optional(path)
    if text is None:
        if not optional:
            held.unreadable.append(f"{path} cannot be read")
        return []
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def routes4(root: HostRoot, held: Held | None = None) -> list[Route4]:
    """The IPv4 routes of the main table; what cannot be read or parsed is noted in `held`."""
    held = held if held is not None else Held()
    path = "/proc/net/route"
    lines = _lines(root, path, held)
    if lines and not lines[0][1].startswith("Iface"):
        held.garbled(path, *lines[0])
        return []
    if not lines and root.exists(path):
        held.unreadable.append(f"{path} is empty (it has a header line even without routes)")
    out = []
    for n, line in lines[1:]:
        cols = line.split()
        try:
            if len(cols) < 8 or integer(cols[6]) is None or CONTROL.search(cols[0]):
                raise _Garbled(line)
            dest, mask = _le_ip(cols[1]), _le_ip(cols[7])
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
            out.append(Route4(cols[0], net, _le_ip(cols[2]), int(cols[6], 10)))
        except ValueError:
            held.garbled(path, n, line)
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
                held.garbled(path, leaf_line, last_leaf)
                continue
            if not addr.is_loopback and addr not in addrs:
                addrs.append(addr)
    return addrs


def _hex6(text: str) -> ipaddress.IPv6Address:
    if len(text) != 32:
        raise _Garbled(text)
    return ipaddress.IPv6Address(bytes.fromhex(text))


def ipv6(root: HostRoot, held: Held) -> tuple[list[ipaddress.IPv6Address], list[Route6]]:
    """The host's IPv6 addresses and routes; the ones that count are added to `held`."""
    addrs, routes = "/proc/net/if_inet6", "/proc/net/ipv6_route"
    without_ipv6 = not root.exists(addrs) and not root.exists(routes)
    own: list[ipaddress.IPv6Address] = []
    for n, line in _lines(root, addrs, held, optional=without_ipv6):
        cols = line.split()
        try:
            if len(cols) != 6 or CONTROL.search(cols[5]):
                raise _Garbled(line)
            addr6 = _hex6(cols[0])
        except ValueError:
            held.garbled(addrs, n, line)
            continue
        own.append(addr6)
        if addr6 not in _LINK_LOCAL6 and not addr6.is_loopback:
            held.add(cols[5], f"address {addr6}")
    table: list[Route6] = []
    for n, line in _lines(root, routes, held, optional=without_ipv6):
        cols = line.split()
        try:
            if len(cols) != 10 or any(hexadecimal(c, prefix=False) is None for c in (cols[1], cols[5], cols[8])) \
                    or CONTROL.search(cols[9]):
                raise _Garbled(line)
            dest, plen, iface = _hex6(cols[0]), int(cols[1], 16), cols[9]
            route = Route6(iface, ipaddress.IPv6Network((dest, plen), strict=False), int(cols[5], 16),
                           int(cols[8], 16))
        except ValueError:
            held.garbled(routes, n, line)
            continue
        table.append(route)
        if dest in _LINK_LOCAL6 or dest in _MULTICAST6 or plen == 128:
            continue  # link-local, multicast, and the host's own addresses (counted above)
        held.add(iface, "default route (IPv6)" if plen == 0 else f"route {dest}/{plen}")
    return own, table
