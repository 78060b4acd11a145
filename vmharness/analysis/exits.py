"""The hypervisor's side of a request at the baseline's peak, instance by instance: how many VM exits of
each kind the guest's vCPUs took per request (KVM's counters over the host's reading window,
vmharness/bench/hostview.py, over the requests the client's rate puts in it), how much CPU time its
vCPU threads spent on the host per request, and how much its QEMU spent outside them (device emulation,
I/O threads). A mitigation on either side of the hypervisor shows here as more exits (an intercepted MSR
or instruction), costlier ones (L1D flushes on VM entry), more vCPU time for the same request, or more
of QEMU's (a host kernel's mitigation on QEMU's own system calls). Under TCG there are no VM exits to
count, and one line says so."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from vmharness.analysis.cells import Cell, vcpu_means

SHOWN = 6  # kinds named in the text, the most frequent first; the JSON has all
NOT_EXITS = ("l1d_flush", "insn_emulation", "hypercalls")  # counted with them, but not exits themselves


@dataclass(frozen=True)
class View:
    instance: str
    exits: dict[str, float] | None  # kind -> mean per request over the iterations that counted
    iterations: int  # those iterations
    vcpu_us: float | None  # the vCPU threads' CPU time per request on the host, microseconds
    qemu_us: float | None = None  # its QEMU's CPU time outside the vCPU threads per request, microseconds


def views(table: dict[str, dict[int, Cell]], peak: int, baseline: str, manifests: list[dict[str, Any]]
          ) -> list[View]:
    """Each instance measured at `peak`, the baseline first; none for a bench (no guest of the harness's)."""
    out: list[View] = []
    if not any(isinstance(m.get("guest"), dict) for m in manifests):
        return out
    for name in sorted(table, key=lambda n: (n != baseline, n)):
        cell = table[name].get(peak)
        if cell is None:
            continue
        exits = {k: statistics.fmean(row.get(k, 0.0) for row in cell.exits)
                 for k in sorted({k for row in cell.exits for k in row})} if cell.exits else None
        busy, rps = vcpu_means(cell), statistics.fmean(cell.rps) if cell.rps else 0.0
        vcpu_us = sum(busy) / 100 / rps * 1e6 if busy and rps > 0 else None
        qemu_us = statistics.fmean(cell.qemu_other) / 100 / rps * 1e6 if cell.qemu_other and rps > 0 else None
        out.append(View(name, exits, len(cell.exits), vcpu_us, qemu_us))
    return out


def note(manifests: list[dict[str, Any]], found: list[View]) -> str | None:
    """Why no exits were counted, in one line; None when some were, or for a bench (no guest)."""
    guests = [m["guest"] for m in manifests if isinstance(m.get("guest"), dict)]
    if not guests or any(v.exits for v in found):
        return None
    if not any(g.get("kvm") is True for g in guests):
        return "VM exits per request: not available: the guests ran under TCG, which has no VM exits to count"
    return ("VM exits per request: not recorded: libvirt gave no KVM counters for the guests (they need "
            "Linux 5.14, QEMU 7.1 and libvirt 8.9)")


def _kind(name: str) -> str:
    return name.removesuffix("_exits")


def _cpu(v: View) -> str:
    """What the instance's QEMU cost the host per request: its vCPU threads, then its other threads."""
    cpu = "" if v.vcpu_us is None else f"; its vCPU threads {v.vcpu_us:,.0f} µs of host CPU per request"
    return cpu + ("" if v.qemu_us is None else f", QEMU's other threads {v.qemu_us:,.0f} µs")


def _view_line(v: View) -> str:
    cpu = _cpu(v)
    if not v.exits:
        return f"  {v.instance}: no exits counted{cpu}"
    kinds = sorted(((k, x) for k, x in v.exits.items() if k != "exits" and k not in NOT_EXITS and x > 0),
                   key=lambda kx: -kx[1])
    shown = ", ".join(f"{_kind(k)} {x:.3g}" for k, x in kinds[:SHOWN])
    extra = ", ".join(f"{k} {v.exits[k]:.3g}" for k in NOT_EXITS if v.exits.get(k))
    return (f"  {v.instance}: {v.exits.get('exits', 0.0):.3g} exits per request" + (f" ({shown})" if shown else "")
            + (f", and {extra}" if extra else "") + f" over {v.iterations} iteration(s){cpu}")


def lines(found: list[View], why: str | None, peak: int) -> list[str]:
    if why is not None:
        cpu = [f"{v.instance} {v.vcpu_us:,.0f} µs" + ("" if v.qemu_us is None else f" (QEMU's other threads "
                                                                                f"{v.qemu_us:,.0f} µs)")
               for v in found if v.vcpu_us is not None]
        return [why + (f"; the vCPU threads' host CPU per request: {', '.join(cpu)}" if cpu else "")]
    if not any(v.exits for v in found):
        return []
    return [f"VM exits per request at the peak ({peak} connections), KVM's counts:", *map(_view_line, found)]


def to_json(found: list[View], why: str | None) -> dict[str, Any] | None:
    if not found and why is None:
        return None
    return {"note": why, "instances": {
        v.instance: {"exits_per_request": None if v.exits is None else {k: round(x, 4) for k, x in v.exits.items()},
                     "iterations": v.iterations,
                     "vcpu_cpu_us_per_request": None if v.vcpu_us is None else round(v.vcpu_us, 1),
                     "qemu_other_cpu_us_per_request": None if v.qemu_us is None else round(v.qemu_us, 1)}
        for v in found}}
