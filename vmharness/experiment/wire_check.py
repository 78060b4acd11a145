"""Before `vmharness run` takes anything: with a NIC passed through, a client machine must hold the
guest's client address on the wire cabled to the guest, or wrk could not reach it. Asked of every
client machine (`ip -o -4 addr show`) and said with what to do."""

from __future__ import annotations

from vmharness.bench.machines import machine
from vmharness.errors import HarnessError
from vmharness.model.sections import RunConfig


def holder(address: str, listings: dict[str, str]) -> tuple[str, str] | None:
    """The (client host, interface) whose `ip -o -4 addr show` lists `address` (its IP), if any."""
    ip = address.split("/")[0]
    for host, text in listings.items():
        for line in text.splitlines():
            fields = line.split()
            if len(fields) > 3 and fields[2] == "inet" and fields[3].split("/")[0] == ip:
                return host, fields[1]
    return None


def check_wire(cfg: RunConfig, name: str) -> tuple[str, str] | None:
    """With a NIC passed through, a client machine must hold guest.client_address (`name`: the flag or
    key it came from) on the wire to the guest, or wrk cannot reach the guest's address: said before
    anything is taken. Returns the (host, interface) holding it."""
    g = cfg.guest
    if not g.bdf:
        return None
    hosts = dict.fromkeys(c.host for c in cfg.client)
    listings = {h: machine(h).run(["ip", "-o", "-4", "addr", "show"], timeout=30).stdout for h in hosts}
    found = holder(g.client_address, listings)
    if found is None:
        where = " or ".join("this machine" if h == "local" else h for h in hosts)
        raise HarnessError(f"{name} {g.client_address}: no client ({where}) holds it, so wrk cannot reach the "
                           f"guest at {g.address.split('/')[0]}",
                           f"put it on the client's NIC cabled to {', '.join(g.bdf)} (ip addr add "
                           f"{g.client_address} dev IFACE), or pass --client-address with the address it has there")
    return found
