"""The SSH guard's verdict on one interface: why the host uses it (or may use it), said as the chain of
devices up to each holder (`ens1f0 → bond0 → vmbr0 holds address 192.0.2.10, default route`), or None
when it surely does not.

This is the guard that keeps `host-prepare` from unbinding the NIC that carries the SSH connection.
It fails closed: when the routing tables, the address list, an interface's link state or its stack
cannot be read or parsed, every interface concerned is reported as possibly in use, with the reason,
and a rebind needs --force.
"""

from __future__ import annotations

from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.host.inspect.net.held import Held
from vmharness.host.inspect.net.ssh_route import SSH_ROUTE
from vmharness.host.inspect.net.stack import NET, OVS_DATAPATH, chains
from vmharness.system.root import HostRoot

OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")  # RFC 2863


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


def in_use(root: HostRoot, iface: str, held: Held) -> InUse | None:
    """Why the host uses (or may use) this interface, or None when it surely does not."""
    found = chains(iface, held)
    holders = [Holder(chain, tuple(held.by_iface[name])) for name, chain in found.items()
               if held.by_iface.get(name)]
    holders.sort(key=lambda h: not any(x.startswith(SSH_ROUTE) for x in h.holds))  # stable: nearest next
    to_ovs = found.get(OVS_DATAPATH, ())
    ovs_port = to_ovs[-2] if len(to_ovs) > 1 else None
    if holders:
        return InUse(iface, tuple(holders), (), ovs_port)
    unknown = list(held.unreadable)
    for name in found:
        unknown += held.stack_unknown.get(name, [])
        if (why := _link_state_unknown(root, name)) is not None:
            unknown.append(why)
    return InUse(iface, (), tuple(unknown), ovs_port) if unknown else None
