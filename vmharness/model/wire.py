"""The benchmark wire's two addresses: the guest's on its passed-through NIC, and the clients' on the
NIC cabled to it. Each is checked where it is read (a key or a flag, named in the error), because
each ends up on a real link: `ip addr add` in the guest, wrk's URL on a client.

An address must be one a host can hold on such a link: unicast, so not in "this network" (0.0.0.0/8),
loopback (127.0.0.0/8), link-local (169.254.0.0/16: the kernel and avahi put their own there, and
cloud hosts reach their metadata service through it), multicast (224.0.0.0/4) or the reserved range
with the broadcast address (240.0.0.0/4); nor its network's first or last address. Its prefix leaves
room for the hosts the wire needs: the guest and a client are two hosts, which a /30 holds and a /31
or /32 does not (a /31's two addresses, RFC 3021, are a point-to-point form the guest's set-up does
not use); a prefix shorter than /8 covers more than any wire needs and overlaps, whatever the
address, networks the host routes elsewhere (and a /0 is the whole Internet). Whether the host
already routes the wire's network through another interface is a question for the host itself:
vmharness.host.inspect.wire_routes."""

from __future__ import annotations

import ipaddress

from vmharness.errors import HarnessError

MIN_PREFIX, MAX_PREFIX = 8, 30
NOT_UNICAST = (
    (ipaddress.IPv4Network("0.0.0.0/8"), "in 0.0.0.0/8 (\"this network\")"),
    (ipaddress.IPv4Network("127.0.0.0/8"), "a loopback address (127.0.0.0/8)"),
    (ipaddress.IPv4Network("169.254.0.0/16"), "a link-local address (169.254.0.0/16)"),
    (ipaddress.IPv4Network("224.0.0.0/4"), "a multicast address (224.0.0.0/4)"),
    (ipaddress.IPv4Network("240.0.0.0/4"), "a reserved or broadcast address (240.0.0.0/4)"),
)
# The benchmark wire's addresses when none are given: a /24 of 198.19.0.0/16, the half of the
# benchmarking range 198.18.0.0/15 that the guests' management links (198.18.0.0/16) never use.
DEFAULT_ADDRESS = "198.19.0.2/24"
DEFAULT_CLIENT_ADDRESS = "198.19.0.1/24"
_HINT = f"write an IPv4 address with its prefix, e.g. {DEFAULT_ADDRESS} (the benchmarking range 198.19.0.0/16)"


def check_address(value: str, where: str) -> str:
    """An IPv4 address with its prefix length, as the guest's NIC is given it: 198.19.0.2/24; "" is
    none given. `where` (a key or a flag) is named in the error."""
    if not value:
        return value
    try:
        iface = ipaddress.IPv4Interface(value) if value.isascii() else None
    except ValueError:
        iface = None
    shown = f"{where} {value[:80]!r}"
    if iface is None or "/" not in value:
        raise HarnessError(f"{shown} is not an IPv4 address with a prefix length", _HINT)
    net = iface.network
    if not MIN_PREFIX <= net.prefixlen <= MAX_PREFIX:
        why = "leaves no room for the guest and a client (two hosts need a /30 or larger)" \
            if net.prefixlen > MAX_PREFIX else f"spans more than any wire needs (at most a /{MIN_PREFIX})"
        raise HarnessError(f"{shown}: its prefix /{net.prefixlen} {why}", _HINT)
    for special, what in NOT_UNICAST:
        if iface.ip in special:
            raise HarnessError(f"{shown} is {what}, not a unicast address a link can hold", _HINT)
        if net.overlaps(special):
            raise HarnessError(f"{shown}: its network {net} holds {what.removeprefix('a ').removeprefix('in ')}",
                               _HINT)
    if iface.ip in (net.network_address, net.broadcast_address):
        which = "network" if iface.ip == net.network_address else "broadcast"
        raise HarnessError(f"{shown} is not an IPv4 host's address: it is the {which} address of {net}", _HINT)
    return value


def wire(address: str, client_address: str, names: tuple[str, str]) -> tuple[str, str]:
    """The guest's and the clients' addresses on the benchmark wire, each checked already (`names`:
    the flag or key each came from): a missing one is the first host of the other's network that the
    other is not; both missing, the defaults. They must share one network and differ."""
    if not address and not client_address:
        return DEFAULT_ADDRESS, DEFAULT_CLIENT_ADDRESS
    given = ipaddress.IPv4Interface(address or client_address)
    other = next(str(h) for h in given.network.hosts() if h != given.ip)
    guest = ipaddress.IPv4Interface(address or f"{other}/{given.network.prefixlen}")
    client = ipaddress.IPv4Interface(client_address or f"{other}/{given.network.prefixlen}")
    if guest.network != client.network:
        raise HarnessError(f"{names[0]} {address} and {names[1]} {client_address} are not on one network "
                           f"({guest.network} and {client.network})",
                           "the clients and the guest share the wire: give both the same network and prefix, "
                           f"e.g. {DEFAULT_ADDRESS} and {DEFAULT_CLIENT_ADDRESS}")
    if guest.ip == client.ip:
        raise HarnessError(f"{names[0]} and {names[1]} are both {guest.ip}",
                           f"give the clients another host of {guest.network}")
    return str(guest), str(client)
