"""The record the network readers fill: what each interface holds, how interfaces are stacked, and what
could not be read. Every reader writes into one `Held`, so that a fault anywhere is seen by the verdict
(an interface may hold something nobody can see: the guard fails closed)."""

from __future__ import annotations

from dataclasses import dataclass, field


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

    def garbled(self, path: str, n: int, line: str) -> None:
        """Line `n` of a procfs table could not be parsed."""
        self.unreadable.append(f"{path} line {n} is garbled: {line.strip()[:60]!r}")
