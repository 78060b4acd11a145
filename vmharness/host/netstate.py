"""Which network interfaces the host is using: those holding a route or an address, directly or
through their bond/bridge master. Read from procfs text only, so a snapshot answers the same."""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

from vmharness.host.root import HostRoot

_LINK_LOCAL6 = ipaddress.ip_network("fe80::/10")
_MULTICAST6 = ipaddress.ip_network("ff00::/8")


@dataclass(frozen=True)
class Route4:
    iface: str
    network: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address

    @property
    def is_default(self) -> bool:
        return self.network.prefixlen == 0


def _le_ip(hex_text: str) -> ipaddress.IPv4Address:
    """/proc/net/route prints addresses as host-order (little-endian on x86) hex."""
    return ipaddress.IPv4Address(socket.inet_ntoa(struct.pack("<I", int(hex_text, 16))))


def routes4(root: HostRoot) -> list[Route4]:
    text = root.read_optional("/proc/net/route") or ""
    out = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 8:
            continue
        dest, mask = _le_ip(cols[1]), _le_ip(cols[7])
        net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        out.append(Route4(cols[0], net, _le_ip(cols[2])))
    return out


def local_addrs4(root: HostRoot) -> list[ipaddress.IPv4Address]:
    """Addresses the host owns: the `/32 host LOCAL` leaves of the local table in fib_trie."""
    text = root.read_optional("/proc/net/fib_trie") or ""
    addrs: list[ipaddress.IPv4Address] = []
    last_leaf: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|--") or stripped.startswith("+--"):
            last_leaf = stripped[3:].split()[0]
        elif stripped.startswith("/32 host LOCAL") and last_leaf:
            addr = ipaddress.IPv4Address(last_leaf.split("/")[0])
            if not addr.is_loopback and addr not in addrs:
                addrs.append(addr)
    return addrs


def _hex6(text: str) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(bytes.fromhex(text))


def reasons(root: HostRoot) -> dict[str, list[str]]:
    """For each interface that holds something, what it holds ("default route", "address 10.0.0.5").
    Link-local and multicast IPv6 entries are left out: every interface that is up has them."""
    held: dict[str, list[str]] = {}

    def add(iface: str, what: str) -> None:
        if iface == "lo":
            return
        items = held.setdefault(iface, [])
        if what not in items:
            items.append(what)

    r4 = routes4(root)
    for r in r4:
        add(r.iface, "default route" if r.is_default else f"route {r.network}")
    # fib_trie does not say which interface owns an address: the interface of the most specific
    # non-default route that contains it does (the kernel adds one for every address with a prefix).
    for addr in local_addrs4(root):
        best = max(
            (r for r in r4 if not r.is_default and addr in r.network),
            key=lambda r: r.network.prefixlen,
            default=None,
        )
        if best is not None:
            add(best.iface, f"address {addr}")
    for line in (root.read_optional("/proc/net/if_inet6") or "").splitlines():
        cols = line.split()
        if len(cols) == 6:
            addr6 = _hex6(cols[0])
            if addr6 not in _LINK_LOCAL6 and not addr6.is_loopback:
                add(cols[5], f"address {addr6}")
    for line in (root.read_optional("/proc/net/ipv6_route") or "").splitlines():
        cols = line.split()
        if len(cols) != 10:
            continue
        dest, plen, iface = _hex6(cols[0]), int(cols[1], 16), cols[9]
        if dest in _LINK_LOCAL6 or dest in _MULTICAST6 or plen == 128:
            continue  # link-local, multicast, and the host's own addresses (counted above)
        add(iface, "default route (IPv6)" if plen == 0 else f"route {dest}/{plen}")
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


def active_reason(root: HostRoot, iface: str, held: dict[str, list[str]]) -> str | None:
    """Why the host uses this interface ("default route", "via bond0: default route"), or None."""
    if held.get(iface):
        return ", ".join(held[iface])
    for m in masters(root, iface):
        if held.get(m):
            return f"via {m}: " + ", ".join(held[m])
    return None
