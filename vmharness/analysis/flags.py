"""The reasons not to trust an analysis's answer, which the report lists first: guests that did not boot,
were not pinned or changed their clock, failed points, a server that was not saturated or a guest whose
vCPU threads were not what limited it, a peak at the edge of the sweep or not distinct, too few
iterations or too much noise, errors, packets per request that do not fit the configuration, a machine
shared between sides, no KVM. Each says the figure it rests on."""

from __future__ import annotations

import re
from typing import Any

from vmharness.analysis import packets, sides
from vmharness.analysis.cells import Cell, server_busy, vcpu_means
from vmharness.analysis.sides import SATURATED
from vmharness.rundir.cross_check import instance_names
from vmharness.rundir.store import RunDir
from vmharness.stats import LEVEL, Interval

ERROR_SHARE = 0.01
CLOCK_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")  # tsc, hpet, acpi_pm, kvm-clock
NOISY = 0.10  # relative half-width of the throughput interval


def session_flags(run: RunDir, prefix: str = "") -> list[str]:
    """`vmharness run`'s guests that did not boot or could not serve, each with why, and those whose
    QEMU threads were not held to the planned CPUs, and boots whose guest changed its clocksource while
    it was measured (the `clock` record the runner writes)."""
    out, riders, known = [], {}, instance_names(run.manifest)
    for r in run.records():
        if r.get("kind") == "session" and r.get("ok") and isinstance(r.get("riders"), list):
            riders[(r["instance"], r["iteration"])] = [n for n in r["riders"] if n in known]
        if r.get("kind") == "clock" and None not in (r.get("at_start"), r.get("at_end")) \
                and r.get("at_start") != r.get("at_end"):
            also = riders.get((r["instance"], r["iteration"]))
            rode = f" (with {', '.join(also)}, on its boot)" if also else ""
            was, now = _clock(r.get("at_start")), _clock(r.get("at_end"))
            out.append(f"{prefix}{r['instance']} iteration {r['iteration']}{rode}: the guest's clocksource went from "
                       f"{was} to {now} while it was measured (its kernel judged {was} unstable, as a guest under "
                       f"TCG on a loaded host judges the TSC): its points after the change read the time from "
                       f"{now}, by a system call each where that is hpet or acpi_pm, which the vDSO cannot read")
        if r.get("kind") != "session":
            continue
        where = f"{prefix}{r['instance']} iteration {r['iteration']}"
        pins = r.get("pinning") or {}
        if not r.get("ok"):
            out.append(f"{where} measured nothing: {r.get('error', '?')}")
        elif pins.get("ok") is False:
            out.append(f"not pinned: {where}'s vCPU threads ran on CPUs {pins['vcpus']} and its emulator on "
                       f"{pins['emulator']!r}, planned {pins['planned_vcpus']} and {pins['planned_emulator']}")
    return out


def _clock(name: Any) -> str:
    """A clocksource's name as a guest wrote it, said only if it is one (the record is data)."""
    return name if isinstance(name, str) and CLOCK_NAME.fullmatch(name) else "an unreadable clock"


def peak_flags(manifests: list[dict[str, Any]], peak: int, cell: Cell, curve: dict[int, Interval],
               plausible: list[int], table: dict[str, dict[int, Cell]], flags: list[str],
               highest: int | None = None) -> None:
    """What makes the answer at `peak` (the baseline's `cell` there) doubtful, appended to `flags`;
    `highest`: the baseline's own peak, where the run read its changes elsewhere (sweep.variants)."""
    busy = server_busy(cell)
    if busy is not None and busy < SATURATED:
        flags.append(f"not saturated: the server was {busy:.0f}% busy at the peak ({peak} connections); "
                     "overhead is hidden by idle CPU (seed 001)")
    vcpus, waits = vcpu_means(cell), vcpu_means(cell, waited=True)
    why = (f"of the rest they waited {', '.join(f'{w:.0f}%' for w in waits)} for a host CPU other work held, and "
           "otherwise for QEMU's I/O thread or an interrupt" if waits is not None and len(waits) == len(vcpus or [])
           else "the rest they waited (for QEMU's I/O thread, or preempted)")
    if vcpus is not None and (busy is None or busy >= SATURATED) and min(vcpus) < SATURATED:
        flags.append(f"the guest looks busy ({busy:.0f}%) but its vCPU threads ran "
                     f"{', '.join(f'{v:.0f}%' for v in vcpus)} of the time on the host at the peak: {why}; the "
                     "guest's CPU is not all that limits it"
                     if busy is not None else
                     f"the guest's vCPU threads ran {', '.join(f'{v:.0f}%' for v in vcpus)} of the time on the "
                     "host at the peak")
    flags += sides.flags(cell.sides, peak, busy, curve[peak].mean)
    for manifest in manifests:
        machines = manifest.get("machines", {})
        server = machines.get("server", {}).get("machine")
        if server in [c.get("machine") for c in machines.get("clients", [])]:
            flags.append("the server and a client share a machine: their CPU use cannot be told apart")
            break
        if manifest.get("guest", {}).get("shares_host_with_client"):
            flags.append("the guest runs on a client's machine: wrk and the guest's vCPUs share its CPUs")
            break
    if (top := peak if highest is None else highest) == max(curve):
        flags.append(f"the throughput peaks at the largest count ({top}): it may still rise; extend the sweep")
    if plausible:
        flags.append(f"the peak is not distinct: {', '.join(map(str, plausible))} connections are within its "
                     f"{LEVEL:.0%} interval")
    if curve[peak].n < 2:
        flags.append("one iteration at the peak: no interval, so no overhead can be told from noise; add iterations")
    elif curve[peak].relative_half > NOISY:
        flags.append(f"noisy: the peak's {LEVEL:.0%} interval is ±{curve[peak].relative_half:.0%} of its mean "
                     f"over {curve[peak].n} iterations; add iterations")
    for name, by_count in table.items():
        for count, c in sorted(by_count.items()):
            if c.requests and c.errors / c.requests > ERROR_SHARE:
                flags.append(f"errors: {name} at {count} connections had {c.errors / c.requests:.1%} errors "
                             "or non-2xx responses")
    config = manifests[0].get("config", {}).get("server", {}) if manifests else {}
    for name, by_count in table.items():
        if peak in by_count and (said := packets.flag(name, peak, by_count[peak].packets, config)):
            flags.append(said)
    if any(m.get("guest", {}).get("kvm") is False for m in manifests):
        flags.append("no KVM: the guest ran under TCG; these are not hardware numbers")
