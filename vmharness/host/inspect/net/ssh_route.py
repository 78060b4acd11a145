"""Which interface carries the route to the SSH peer: the session's SSH_CONNECTION (the live host's,
or the one host-snapshot recorded), parsed, and matched against the routing tables as the kernel would
(the longest prefix, then the lowest metric). That interface holds "the route to your SSH peer" first
of all: host-prepare refuses it as your SSH connection."""

from __future__ import annotations

import ipaddress
import os

from vmharness.digits import is_digits
from vmharness.host.inspect import probes
from vmharness.host.inspect.net.held import Held
from vmharness.host.inspect.net.routes import RTF_REJECT, Route4, Route6
from vmharness.system.root import HostRoot

SSH_ROUTE = "the route to your SSH peer"


def _peer(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The client address of `CLIENT_IP CLIENT_PORT SERVER_IP SERVER_PORT`; ValueError if garbled."""
    fields = text.split()
    if len(fields) != 4 or not all(is_digits(p) and int(p) <= 65535 for p in (fields[1], fields[3])):
        raise ValueError(text)
    ipaddress.ip_address(fields[2])
    peer = ipaddress.ip_address(fields[0])
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        return peer.ipv4_mapped
    return peer


def _route_to(peer: ipaddress.IPv4Address | ipaddress.IPv6Address, r4: list[Route4],
              r6: list[Route6]) -> str | None:
    """The interface the kernel sends to `peer` by: the longest matching prefix, then the lowest
    metric, in the main table (/proc shows no other)."""
    if isinstance(peer, ipaddress.IPv4Address):
        best4 = max((r for r in r4 if peer in r.network), key=lambda r: (r.network.prefixlen, -r.metric),
                    default=None)
        return best4.iface if best4 else None
    if peer.scope_id:
        return peer.scope_id  # a link-local peer names its interface
    best6 = max((r for r in r6 if r.iface != "lo" and not r.flags & RTF_REJECT and peer in r.network),
                key=lambda r: (r.network.prefixlen, -r.metric), default=None)
    return best6.iface if best6 else None


def note(held: Held, text: str, r4: list[Route4], r6: list[Route6],
         own: list[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> None:
    """Add the SSH route to the interface it leaves by, or say why that interface is unknown."""
    try:
        peer = _peer(text)
    except ValueError:
        held.unreadable.append(f"SSH_CONNECTION holds {text[:80]!r}, not 'CLIENT_IP PORT SERVER_IP PORT': "
                               "which route carries your SSH session is unknown")
        return
    if peer.is_loopback or peer in own:
        return  # a session from this host itself: it runs over lo
    iface = _route_to(peer, r4, r6)
    if iface is None:
        held.unreadable.append(f"no route in /proc/net/route or /proc/net/ipv6_route reaches your SSH peer "
                               f"{peer} (policy routing?)")
        return
    held.ssh_iface = iface
    held.add(iface, f"{SSH_ROUTE} {peer}", first=True)


def session(root: HostRoot) -> str | None:
    """SSH_CONNECTION on the live host; on a snapshot, the one host-snapshot recorded (the session
    running the harness now is not the snapshotted host's), if any."""
    if root.live:
        return probes.ssh_connection(root, os.environ)
    recorded = (probes.load(root) or {}).get("ssh_connection")
    if recorded is None or isinstance(recorded, str):
        return recorded
    return repr(recorded)  # not text: garbled, and said so
