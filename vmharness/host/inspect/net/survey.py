"""Everything the SSH guard reads, gathered into one `Held` record: for each interface what it holds
(routes, addresses, the SSH session's route), how the interfaces are stacked, and what could not be
read. Read from procfs text and sysfs links only, so a snapshot answers the same."""

from __future__ import annotations

from collections.abc import Mapping

from vmharness.host.inspect.net import routes, ssh_route, stack
from vmharness.host.inspect.net.held import Held
from vmharness.system.root import HostRoot


def reasons(root: HostRoot, env: Mapping[str, str] | None = None) -> Held:
    """For each interface that holds something, what it holds, and how the interfaces are stacked.
    Link-local and multicast IPv6 entries are left out: every interface that is up has them.
    `env` gives SSH_CONNECTION; by default it is the live host's session, or the one a snapshot
    recorded."""
    held = Held()
    r4 = routes.routes4(root, held)
    for r in r4:
        held.add(r.iface, "default route" if r.is_default else f"route {r.network}")
    # fib_trie does not say which interface owns an address: the interface of the most specific
    # non-default route that contains it does (the kernel adds one for every address with a prefix).
    own4 = routes.local_addrs4(root, held)
    for addr in own4:
        best = max(
            (r for r in r4 if not r.is_default and addr in r.network),
            key=lambda r: r.network.prefixlen,
            default=None,
        )
        if best is not None:
            held.add(best.iface, f"address {addr}")
    own6, r6 = routes.ipv6(root, held)
    text = env.get("SSH_CONNECTION") if env is not None else ssh_route.session(root)
    if text is not None:
        ssh_route.note(held, text, r4, r6, [*own4, *own6])
    stack.read(root, held)
    return held
