"""Whether the host already routes the benchmark wire's network through another interface: then the
guest's address is, for this host, somewhere else (a lab network, a VPN's range, a bridge's subnet),
and either wrk's traffic leaves by the wrong interface or the wire shadows hosts the machine uses.
Read from the routing table through HostRoot (vmharness.host.inspect.net.routes), so `run --print-xml` on a
snapshot answers as the run on that host would.

What is not "another interface":
- the interface that holds the clients' address on this host: it is the wire's own end, and its
  route to the wire's network is the wire (a local client set it up as `ip addr add` told it);
- the harness's own management links: taps named `vmh-*` with a /24 of 198.18.0.0/16, one per guest
  that is up, which a killed run may leave until the next run gives them back; each takes a /24 no
  interface holds, so it is never what the researcher's wire collides with;
- the default route, and routes broader than a /8: a VPN splits its default route into 0.0.0.0/1 and
  128.0.0.0/1, and the wire's own, longer route wins over any of them on the client;
- `lo`, and routes through no interface (unreachable and prohibit routes carry nothing)."""

from __future__ import annotations

import ipaddress

from vmharness.errors import HarnessError
from vmharness.host.inspect.net.held import Held
from vmharness.host.inspect.net.routes import Route4, local_addrs4, routes4
from vmharness.system.root import HostRoot

LINK_RANGE = ipaddress.IPv4Network("198.18.0.0/16")  # the guests' management links (guest.instance)
TAP_PREFIX = "vmh-"
BROADEST = 8  # routes with a shorter prefix count as the default route's parts


def _wire_ends(routes: list[Route4], own: list[ipaddress.IPv4Address],
               client: ipaddress.IPv4Address) -> set[str]:
    """The interface holding the clients' address here, if this host holds it: the interface of the
    most specific non-default route that contains it (the kernel adds one for every address)."""
    if client not in own:
        return set()
    best = max((r for r in routes if not r.is_default and client in r.network),
               key=lambda r: r.network.prefixlen, default=None)
    return {best.iface} if best is not None else set()


def _ours(route: Route4) -> bool:
    return route.iface.startswith(TAP_PREFIX) and route.network.subnet_of(LINK_RANGE)


def check(root: HostRoot, address: str, client_address: str, where: str) -> None:
    """Refuse a wire (the guest's `address` and the clients' `client_address`, both checked already)
    whose network overlaps a route of this host through another interface; `where` names the key or
    flag the network came from, with its value (`--address 10.1.0.2/24`)."""
    held = Held()  # a table that cannot be read checks nothing here; host-prepare's guard fails closed
    routes = routes4(root, held)
    guest = ipaddress.IPv4Interface(address)
    client = ipaddress.IPv4Interface(client_address).ip
    ends = _wire_ends(routes, local_addrs4(root, held), client)
    for r in routes:
        if r.network.prefixlen < BROADEST or r.iface in ends or r.iface in ("lo", "*") or _ours(r):
            continue
        if r.network.overlaps(guest.network):
            via = f" via {r.gateway}" if int(r.gateway) else ""
            raise HarnessError(
                f"{where}: the wire's network {guest.network} overlaps {r.network}, which this host routes "
                f"through {r.iface}{via}",
                "give the wire a network no other interface routes (`ip -4 route` lists them), e.g. "
                "198.19.0.2/24; only the client's NIC cabled to the guest may hold it")
