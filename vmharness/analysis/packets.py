"""Packets per request on the server: does it send what its response needs, and no more?

A small response that leaves as two segments (headers by writev, body by sendfile, with nodelay and
no cork) doubles the packets, the interrupts and the softirq work per request, and changes what a
mitigation costs: that was this harness's own nginx template once (docs/bench.md, "Fidelity"). The
samplers count the server's packets; divided by the requests wrk counted, they say how many segments
each response took. A response of the configured file needs ceil((file + headers) / MSS) segments.
On loopback every packet is counted once as sent and once as received on `lo`, both directions
together: the request's segment is added to what is needed there.
"""

from __future__ import annotations

import math
from typing import Any

HEADER_BYTES = 250  # nginx's response headers for a static file, about
MSS = 1448  # a 1500-byte MTU less the IPv4 and TCP headers with timestamps
SLACK = 0.5  # pure ACKs and the odd retransmission: tolerated up to half a packet per request


def per_request(samples: dict[str, Any], server: str, rps: float) -> tuple[float, bool] | None:
    """Packets the server sent per request, and whether they were counted on loopback (both
    directions); None without the server's network samples."""
    here = samples.get(server)
    net = here.get("net", {}) if isinstance(here, dict) else None
    if rps <= 0 or not isinstance(net, dict):
        return None
    wired = [v.get("tx_packets_per_s", 0) for k, v in net.items() if k != "lo" and isinstance(v, dict)]
    if sum(wired) > 0:
        return sum(wired) / rps, False
    lo = net.get("lo")
    if isinstance(lo, dict) and lo.get("tx_packets_per_s", 0) > 0:
        return float(lo["tx_packets_per_s"]) / rps, True
    return None


def needed(server: dict[str, Any], loopback: bool) -> int:
    """Segments one response needs (and the request's, on loopback), from the run's [server]."""
    size = server.get("filesize", 64) if server.get("mode", "file") == "file" else 0
    size = size if isinstance(size, int) and size >= 0 else 64
    return math.ceil((size + HEADER_BYTES) / MSS) + (1 if loopback else 0)


def flag(instance: str, count: int, measured: list[tuple[float, bool]], server: dict[str, Any]) -> str | None:
    """A warning when the server sent more packets per request than its responses need."""
    if not measured:
        return None
    mean = sum(m for m, _ in measured) / len(measured)
    loopback = measured[0][1]
    need = needed(server, loopback)
    if mean <= need + SLACK:
        return None
    where = "on loopback, both directions" if loopback else "sent"
    return (f"packets: {instance} at {count} connections took {mean:.2f} packets per request ({where}) where "
            f"{need} would do: its responses leave in pieces (sendfile without tcp_nopush?), which adds "
            "interrupts and softirq work to every request")
