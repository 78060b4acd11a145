"""Which network interfaces the host is using: those holding a route or an address, directly or
through any device stacked on them (bond, bridge, VLAN, macvlan/ipvlan, Open vSwitch), and the one
that carries the route to the SSH peer. Read from procfs text and sysfs links only, so a snapshot
answers the same.

This is the guard that keeps `host-prepare` from unbinding the NIC that carries the SSH connection.
Unbinding a NIC takes down everything stacked on it, so a port counts as holding what any device
above it holds: `ens1f0 → bond0 → vmbr0` holds vmbr0's address. The stack is read from every link
the kernel offers (`upper_*`/`lower_*`, `master`, a bridge's `brif/`, a bond's `bonding/slaves`,
`/proc/net/vlan/config`), because each kind of device shows itself through a different subset.

Open vSwitch is the exception: its ports are linked to the datapath device (`ovs-system`), never to
the bridge's own interface (`br-ex`), which is an internal port that no sysfs link ties to its
bridge. So an OVS port counts as holding what every interface that may be an OVS bridge's holds.

The guard fails closed: when the routing tables, the address list, an interface's link state or its
stack cannot be read or parsed, every interface concerned is reported as possibly in use, with the
reason, and a rebind needs --force. IPv6 files may be absent together (a kernel without IPv6), not
one without the other.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from vmharness.digits import hexadecimal, integer, is_digits
from vmharness.environ import CONTROL
from vmharness.errors import HarnessError
from vmharness.host.inspect import probes
from vmharness.system.root import HostRoot

_LINK_LOCAL6 = ipaddress.ip_network("fe80::/10")
_MULTICAST6 = ipaddress.ip_network("ff00::/8")
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")  # RFC 2863
NET = "/sys/class/net"
VIRTUAL = "/sys/devices/virtual/net/"
VLAN_CONFIG = "/proc/net/vlan/config"
OVS_DATAPATH = "ovs-system"  # the kernel datapath every bridge of ovs-vswitchd shares
SSH_ROUTE = "the route to your SSH peer"
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


@dataclass
class Held:
    """What each interface holds ("default route", "address 10.0.0.5"), how interfaces are stacked,
    and what could not be read (then any interface may hold something nobody can see)."""

    by_iface: dict[str, list[str]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    uppers: dict[str, list[str]] = field(default_factory=dict)  # iface -> devices stacked directly on it
    stack_unknown: dict[str, list[str]] = field(default_factory=dict)  # iface -> what of its stack is unread
    ovs_bridges: list[str] = field(default_factory=list)  # interfaces that may be an OVS bridge's own
    ssh_iface: str | None = None  # the interface the route to the SSH peer leaves by

    def add(self, iface: str, what: str, *, first: bool = False) -> None:
        if iface == "lo":
            return
        items = self.by_iface.setdefault(iface, [])
        if what in items:
            return
        if first:
            items.insert(0, what)
        else:
            items.append(what)

    def link(self, lower: str, upper: str) -> None:
        above = self.uppers.setdefault(lower, [])
        if upper != lower and upper not in above:
            above.append(upper)

    def stack_fault(self, iface: str, why: str) -> None:
        self.stack_unknown.setdefault(iface, []).append(why)


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


def _garbled(held: Held, path: str, n: int, line: str) -> None:
    held.unreadable.append(f"{path} line {n} is garbled: {line.strip()[:60]!r}")


def routes4(root: HostRoot, held: Held | None = None) -> list[Route4]:
    """The IPv4 routes of the main table; what cannot be read or parsed is noted in `held`."""
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
            if len(cols) < 8 or integer(cols[6]) is None or CONTROL.search(cols[0]):
                raise _Garbled(line)
            dest, mask = _le_ip(cols[1]), _le_ip(cols[7])
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
            out.append(Route4(cols[0], net, _le_ip(cols[2]), int(cols[6], 10)))
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


def _ipv6(root: HostRoot, held: Held) -> tuple[list[ipaddress.IPv6Address], list[Route6]]:
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
            _garbled(held, addrs, n, line)
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
            _garbled(held, routes, n, line)
            continue
        table.append(route)
        if dest in _LINK_LOCAL6 or dest in _MULTICAST6 or plen == 128:
            continue  # link-local, multicast, and the host's own addresses (counted above)
        held.add(iface, "default route (IPv6)" if plen == 0 else f"route {dest}/{plen}")
    return own, table


# --- the stack: which devices sit on which --------------------------------------------------------
def _read_stack(root: HostRoot, held: Held) -> None:
    """Fill `held.uppers` from every link the kernel offers, and list the possible OVS bridge
    interfaces. An interface whose links cannot be read is noted in `held.stack_unknown`."""
    candidates: list[str] = []
    for name in root.listdir(NET):
        d = f"{NET}/{name}"
        if name == "bonding_masters":
            continue  # the bonding driver's control file, not a device
        try:
            if not root.is_dir(d):
                held.stack_fault(name, f"{d} leads to no device directory")
                continue
            entries = root.listdir(d)
            for entry in entries:
                if entry.startswith("upper_"):
                    held.link(name, entry.removeprefix("upper_"))
                elif entry.startswith("lower_"):
                    held.link(entry.removeprefix("lower_"), name)
            master = root.readlink_name(f"{d}/master")
            if master is not None:
                held.link(name, master)
            for port in root.listdir(f"{d}/brif"):
                held.link(port, name)
            if "bonding" in entries:
                slaves = root.read_optional(f"{d}/bonding/slaves")
                if slaves is None:
                    held.stack_fault(name, f"{d}/bonding/slaves cannot be read")
                for slave in (slaves or "").split():
                    held.link(slave, name)
            # An OVS bridge's own interface is a virtual device on nothing, in no master, and neither
            # a Linux bridge nor a bond; sysfs cannot tell it from a dummy or a tun, so those count too.
            if (root.realpath(d).startswith(VIRTUAL) and name not in ("lo", OVS_DATAPATH)
                    and master is None and "bridge" not in entries and "bonding" not in entries
                    and not any(e.startswith("lower_") for e in entries)):
                candidates.append(name)
        except HarnessError as exc:
            held.stack_fault(name, exc.message)
    _vlans(root, held)
    stacked = {upper for above in held.uppers.values() for upper in above}
    held.ovs_bridges = [c for c in candidates if c not in stacked]


def _vlans(root: HostRoot, held: Held) -> None:
    """802.1Q devices from /proc/net/vlan/config (absent when the 8021q module is not loaded)."""
    text = root.read_optional(VLAN_CONFIG)
    if text is None:
        return
    lines = text.splitlines()
    if not lines or not lines[0].startswith("VLAN Dev name"):
        _garbled(held, VLAN_CONFIG, 1, lines[0] if lines else "")
        return
    for n, line in enumerate(lines[1:], 2):
        if not line.strip() or line.startswith("Name-Type:"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0] or not parts[2] or " " in parts[0] + parts[2] or CONTROL.search(line):
            _garbled(held, VLAN_CONFIG, n, line)
            continue
        held.link(parts[2], parts[0])


# --- the SSH session --------------------------------------------------------------------------------
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


def _ssh(held: Held, text: str, r4: list[Route4], r6: list[Route6],
         own: list[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> None:
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


def _session(root: HostRoot) -> str | None:
    """SSH_CONNECTION on the live host; on a snapshot, the one host-snapshot recorded (the session
    running the harness now is not the snapshotted host's), if any."""
    if root.live:
        return probes.ssh_connection(root, os.environ)
    recorded = (probes.load(root) or {}).get("ssh_connection")
    if recorded is None or isinstance(recorded, str):
        return recorded
    return repr(recorded)  # not text: garbled, and said so


def reasons(root: HostRoot, env: Mapping[str, str] | None = None) -> Held:
    """For each interface that holds something, what it holds, and how the interfaces are stacked.
    Link-local and multicast IPv6 entries are left out: every interface that is up has them.
    `env` gives SSH_CONNECTION; by default it is the live host's session, or the one a snapshot
    recorded."""
    held = Held()
    r4 = routes4(root, held)
    for r in r4:
        held.add(r.iface, "default route" if r.is_default else f"route {r.network}")
    # fib_trie does not say which interface owns an address: the interface of the most specific
    # non-default route that contains it does (the kernel adds one for every address with a prefix).
    own4 = local_addrs4(root, held)
    for addr in own4:
        best = max(
            (r for r in r4 if not r.is_default and addr in r.network),
            key=lambda r: r.network.prefixlen,
            default=None,
        )
        if best is not None:
            held.add(best.iface, f"address {addr}")
    own6, r6 = _ipv6(root, held)
    text = env.get("SSH_CONNECTION") if env is not None else _session(root)
    if text is not None:
        _ssh(held, text, r4, r6, [*own4, *own6])
    _read_stack(root, held)
    return held


# --- the verdict ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Holder:
    chain: tuple[str, ...]  # the interface, then each device stacked on the one before, up to the holder
    holds: tuple[str, ...]

    def text(self, first: str | None = None) -> str:
        names = [first or self.chain[0], *self.chain[1:]]
        return f"{' → '.join(names)} holds {', '.join(self.holds)}"


@dataclass(frozen=True)
class InUse:
    """Why the host uses (or may use) an interface."""

    iface: str
    holders: tuple[Holder, ...]  # the SSH route's holder first, then the nearest
    unknown: tuple[str, ...]  # what could not be read (said only when nobody is seen holding anything)
    ovs_port: str | None = None  # the OVS port on the way, whose bridge interface is a guess

    @property
    def ssh(self) -> bool:
        return any(h.startswith(SSH_ROUTE) for holder in self.holders for h in holder.holds)

    def _ovs_note(self) -> str:
        if self.ovs_port is None or not any(OVS_DATAPATH in h.chain for h in self.holders):
            return ""
        return (f" ({self.ovs_port} is an Open vSwitch port: the kernel links a port to {OVS_DATAPATH}, never to "
                "its bridge's own interface, so it counts as holding what every possible OVS bridge interface "
                "holds)")

    def text(self, first: str | None = None) -> str:
        """`ens1f0 → bond0 → vmbr0 holds address 192.0.2.10, default route`; `first` replaces the
        interface's name (host-prepare puts the PCI address in front of it)."""
        if not self.holders:
            return (f"{first or self.iface} holds routes or addresses that cannot be checked ("
                    + "; ".join(self.unknown) + ")")
        return "; ".join(h.text(first if i == 0 else None) for i, h in enumerate(self.holders)) + self._ovs_note()

    def short(self) -> str:
        """For a table cell: the first holder's chain above the interface and two things it holds."""
        if not self.holders:
            return "routes or addresses that cannot be checked"
        head = self.holders[0]
        items = [h for holder in self.holders for h in holder.holds]
        more = f" +{len(items) - 2} more" if len(items) > 2 else ""
        via = f"via {' → '.join(head.chain[1:])}: " if len(head.chain) > 1 else ""
        return via + ", ".join(items[:2]) + more

    def __str__(self) -> str:
        return self.text()


def _link_state_unknown(root: HostRoot, iface: str) -> str | None:
    path = f"{NET}/{iface}/operstate"
    try:
        state = root.read_optional(path)
    except HarnessError as exc:
        return exc.message
    if state is None:
        return f"{path} cannot be read"
    if state not in OPERSTATES:
        return f"{path} holds {state[:40]!r}"
    return None


def stack(iface: str, held: Held) -> dict[str, tuple[str, ...]]:
    """Every device that goes down with `iface`, each with its chain from `iface`, nearest first.
    The OVS datapath leads to every possible OVS bridge interface."""
    chains: dict[str, tuple[str, ...]] = {iface: (iface,)}
    todo = [iface]
    while todo:
        name = todo.pop(0)
        above = held.uppers.get(name, []) + (held.ovs_bridges if name == OVS_DATAPATH else [])
        for upper in above:
            if upper not in chains:
                chains[upper] = (*chains[name], upper)
                todo.append(upper)
    return chains


def in_use(root: HostRoot, iface: str, held: Held) -> InUse | None:
    """Why the host uses (or may use) this interface, or None when it surely does not."""
    chains = stack(iface, held)
    holders = [Holder(chain, tuple(held.by_iface[name])) for name, chain in chains.items()
               if held.by_iface.get(name)]
    holders.sort(key=lambda h: not any(x.startswith(SSH_ROUTE) for x in h.holds))  # stable: nearest next
    to_ovs = chains.get(OVS_DATAPATH, ())
    ovs_port = to_ovs[-2] if len(to_ovs) > 1 else None
    if holders:
        return InUse(iface, tuple(holders), (), ovs_port)
    unknown = list(held.unreadable)
    for name in chains:
        unknown += held.stack_unknown.get(name, [])
        if (why := _link_state_unknown(root, name)) is not None:
            unknown.append(why)
    return InUse(iface, (), tuple(unknown), ovs_port) if unknown else None
