"""Is each variant what it claims, and does the run recover a cost known in advance?

A variant's cmdline says what was asked; the guest's kernel says what it did. The manifest holds
each instance's facts as its guest reported them at its first boot (guest/provenance.py): kernel, cmdline,
microcode, CPU flags (`pti`, `ibpb`, `ssbd`... are set by the kernel, not the CPU), the
vulnerabilities files and the kernel's own boot-log lines on mitigations. Against the baseline's,
they show what differs; when a variant differs only in the words of its cmdline, the option may have
done nothing (forcing `pti=on` leaves every vulnerabilities file as it was, but sets the `pti` flag
and logs "page tables isolation: enabled"), and the report says so first.

The positive control (`run --control`) is the baseline with its vCPUs capped to a share of a CPU by
libvirt (CFS bandwidth control). The cap takes away the vCPU time the baseline used above it: with
the baseline's vCPU threads busy u_i of the time at the peak (measured on the host, not in the guest,
whose busy time counts the time its vCPU waited), the control keeps sum(min(u_i, cap)) / sum(u_i) of
the baseline's throughput where the guest's CPU time is what limits it. Where the host also measured
the control's own vCPU threads at the peak (c_i), their time is what the cap left them: on a host
whose CPUs other work contends for, a throttled thread does not get all of its quota back, and
min(c_i, cap) stands for min(u_i, cap). The report checks that the change's interval holds that value.

That rests on the guest's own work being what limits it. Where the baseline's vCPU threads waited
for a host CPU at the peak (the kernel's schedstat: other work held the CPU they were runnable on)
for WAIT_LIMIT percent of the time or more, what limited it was partly that other work, whose share
the cap changes in ways the guest does not decide: a control outside its expectation then cannot be
judged, and the report says so and why, not that the run's intervals are not to be trusted.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from vmharness.stats import Change

# What an instance's configuration can change outside its guest's cmdline: the host acts on these.
HOST_KEYS = ("kernel", "initrd", "image", "cpu_features", "qemu_args", "qemu", "kvm_modules", "vcpu_cap", "nginx",
             "config", "profile", "host_boot")
# The facts that show what the guest's kernel did.
KERNEL_FACTS = ("kernel", "version", "microcode")


@dataclass(frozen=True)
class Diff:
    instance: str
    lines: tuple[str, ...]  # what differs from the baseline, one fact a line
    asked: bool  # the cmdline or the configuration differs
    seen: bool  # the guest (kernel, flags, vulnerabilities, boot log) or the host's settings differ
    bits_unseen: bool = False  # its cpu_features differ, and its guest reports nothing different


@dataclass(frozen=True)
class Control:
    instance: str
    cap: int  # percent of a CPU each vCPU may use
    expected: float  # the change in throughput expected at the peak
    change: Change
    recovered: bool  # the change's interval holds `expected`, and not zero: the cost was seen, of its size
    basis: str  # how `expected` was reached
    waited: float | None = None  # the most any baseline vCPU thread waited for a host CPU at the peak, percent

    @property
    def judged(self) -> bool:
        """Whether a miss can be told: the baseline's vCPU threads had their CPUs (or nobody knows)."""
        return unheld(self.waited)


HELD_BELOW = 2.0  # percentage points under its cap at which a control's vCPU thread was held back
WAIT_LIMIT = 10.0  # percent of the time a baseline vCPU thread waited for a host CPU: the control cannot be judged


def unheld(waited: float | None) -> bool:
    """Whether vCPU threads that waited `waited` percent of the time for a host CPU (the most of them; None:
    not read) had their CPUs, so that what they measured is the guest's, not the other work's."""
    return waited is None or waited < WAIT_LIMIT


def expected_change(cap: int, base_vcpus: list[float] | None, idle: list[float] | None = None,
                    control_vcpus: list[float] | None = None) -> tuple[float, str]:
    """What capping each vCPU thread to `cap` percent costs at the peak: the share of the baseline's
    request-serving vCPU time the cap leaves, sum(min(busy, cap) - idle) / sum(busy - idle) - 1, with
    each thread's busy share as the host measured it there and `idle` its share without load (timers,
    samplers: spent each second whatever the load, so the cap takes it from the requests alone);
    without the host's view, as if each thread ran all the time and nothing were spent idle. Where the
    control's own threads were measured there (`control_vcpus`) and ran under their cap, what they ran
    stands for the cap: contention for the host's CPUs held them below it."""
    if not base_vcpus or sum(base_vcpus) <= 0:
        return cap / 100 - 1, f"the cap alone ({cap}% of a CPU); the host's view of the vCPUs was not recorded"
    busy = ", ".join(f"{b:.0f}%" for b in base_vcpus)
    basis = f"{cap}% of a CPU against the baseline's vCPU threads at {busy} on the host at the peak"
    limits = [float(cap)] * len(base_vcpus)
    if control_vcpus is not None and len(control_vcpus) == len(base_vcpus) \
            and any(c < cap - HELD_BELOW for c in control_vcpus):
        limits = [min(c, cap) for c in control_vcpus]
        basis += (f" (the control's ran {', '.join(f'{c:.0f}%' for c in control_vcpus)}: held below their cap "
                  "by other work on the host's CPUs, which is what the cap left them)")
    pairs = list(zip(base_vcpus, idle, strict=True)) if idle is not None and len(idle) == len(base_vcpus) else []
    if not pairs or any(f < 0 or f >= min(b, m) for (b, f), m in zip(pairs, limits, strict=True)):
        kept = sum(min(b, m) for b, m in zip(base_vcpus, limits, strict=True)) / sum(base_vcpus)
        return kept - 1, basis
    kept = sum(min(b, m) - f for (b, f), m in zip(pairs, limits, strict=True)) / sum(b - f for b, f in pairs)
    spent = ", ".join(f"{f:.1f}%" for _, f in pairs)
    return kept - 1, f"{basis}, each less the {spent} it ran without load, which the cap does not shrink"


def _set_diff(what: str, base: list[str], other: list[str]) -> list[str]:
    added, removed = sorted(set(other) - set(base)), sorted(set(base) - set(other))
    out = [f"{what} + {x}" for x in added] + [f"{what} - {x}" for x in removed]
    return out


def _instances(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(i.get("name")): i for i in manifest.get("config", {}).get("instance", []) if isinstance(i, dict)}


def diff(base: dict[str, Any], other: dict[str, Any], base_cfg: dict[str, Any], other_cfg: dict[str, Any],
         name: str) -> Diff:
    """`base`/`other`: the two guests' facts; `*_cfg`: their instance configuration."""
    lines: list[str] = []
    asked = base.get("cmdline") != other.get("cmdline")
    if asked:
        lines.append(f"cmdline: {other.get('cmdline', '?')}")
    host = [f"{k}: {base_cfg.get(k)!r} -> {other_cfg.get(k)!r}" for k in HOST_KEYS
            if base_cfg.get(k) != other_cfg.get(k)]
    lines += host
    seen = bool(host)
    for key in KERNEL_FACTS:
        if base.get(key) != other.get(key):
            lines.append(f"{key}: {other.get(key) or '?'}")
            seen = True
    found = _set_diff("CPU flag", base.get("cpu_flags", []), other.get("cpu_flags", []))
    vb, vo = base.get("vulnerabilities", {}), other.get("vulnerabilities", {})
    found += [f"{k}: {vb.get(k, '-')} -> {vo.get(k, '-')}" for k in sorted(set(vb) | set(vo)) if vb.get(k) != vo.get(k)]
    found += _set_diff("boot log", base.get("mitigation_log", []), other.get("mitigation_log", []))
    lines += found
    reported = bool(found) or any(base.get(k) != other.get(k) for k in KERNEL_FACTS)
    bits = base_cfg.get("cpu_features") != other_cfg.get("cpu_features")
    return Diff(name, tuple(lines), asked or bool(host), seen or bool(found), bits and not reported)


def qemu_label(manifest: dict[str, Any], name: str) -> str:
    """The QEMU that ran `name`'s guests: the version and file the run's check found of the one it names
    (manifest `qemu`), else libvirt's default, with the host's `qemu-system-x86_64 --version`."""
    named = manifest.get("qemu")
    rec = named.get(name) if isinstance(named, dict) else None
    if isinstance(rec, dict) and rec.get("version"):
        return f"QEMU {rec['version']} ({rec.get('real') or rec.get('path')}, sha256 {str(rec.get('sha256'))[:12]})"
    host = manifest.get("host")
    found = re.search(r"version (\S+)", str(host.get("qemu", ""))) if isinstance(host, dict) else None
    return f"QEMU {found.group(1)} (libvirt's default)" if found else "libvirt's default QEMU"


def diffs(manifest: dict[str, Any], baseline: str) -> list[Diff]:
    """Each instance whose guest reported its facts, against the baseline's; a QEMU of another version
    or file is a difference the host made (as a kernel file is)."""
    facts = manifest.get("instances", {})
    configs = _instances(manifest)
    if baseline not in facts:
        return []
    out = []
    for name in sorted(facts):
        if name == baseline or not isinstance(facts[name], dict):
            continue
        d = diff(facts[baseline], facts[name], configs.get(baseline, {}), configs.get(name, {}), name)
        mine, theirs = qemu_label(manifest, baseline), qemu_label(manifest, name)
        if mine != theirs:
            d = dataclasses.replace(d, lines=(*d.lines, f"QEMU: {mine} -> {theirs}"), asked=True, seen=True)
        out.append(d)
    return out


def diff_flags(found: list[Diff], baseline: str) -> list[str]:
    out = []
    for d in found:
        if not d.asked and not d.seen:
            out.append(f"{d.instance} is the same as {baseline}: same cmdline, kernel, CPU flags, vulnerabilities "
                       "and settings; any difference measured is noise")
        elif not d.seen:
            out.append(f"{d.instance}'s cmdline differs from {baseline}'s, but its kernel reports the same "
                       "vulnerabilities, CPU flags and boot-log mitigations: the option may have done nothing")
        elif d.bits_unseen:
            out.append(f"{d.instance}'s cpu_features differ from {baseline}'s, but its guest reports the same kernel, "
                       "vulnerabilities, CPU flags and boot-log mitigations: QEMU may have dropped the bits (under "
                       "TCG it drops every mitigation bit; docs/run.md)")
    return out


def control(manifest: dict[str, Any], changes: dict[str, dict[str, Change]],
            base_vcpus: list[float] | None = None, idle: list[float] | None = None,
            control_vcpus: list[float] | None = None, base_waits: list[float] | None = None) -> Control | None:
    """The control's check, when the run had one and it was measured at the peak; `base_vcpus`: the
    baseline's vCPU threads' busy shares there, from the host (percent); `idle`: theirs without load;
    `control_vcpus`: the control's there; `base_waits`: the shares the baseline's waited for a CPU."""
    c = manifest.get("config", {}).get("control", {})
    cap, name = c.get("cap"), c.get("name")
    if not isinstance(cap, int) or not cap or name not in changes:
        return None
    change = changes[name]["throughput"]
    expected, basis = expected_change(cap, base_vcpus, idle, control_vcpus)
    held = change.bounded and not math.isnan(change.change) and change.low <= expected <= change.high
    return Control(str(name), cap, expected, change, held and change.significant, basis,
                   max(base_waits) if base_waits else None)


def _measured(c: Control) -> str:
    return f"{c.change.change:+.1%} [{c.change.low:+.1%}, {c.change.high:+.1%}]"


def _holds_expected(c: Control) -> bool:
    return c.change.low <= c.expected <= c.change.high


def control_flag(c: Control) -> str | None:
    """A warning when the control missed; none when it was recovered, or had no interval to check
    (one iteration: the report already warns that nothing can be told from noise)."""
    if c.recovered or not c.change.bounded:
        return None
    if not c.judged:
        return (f"the positive control cannot be judged on this run: {c.instance} (vCPUs capped to {c.cap}%) was "
                f"expected to change throughput by {c.expected:+.1%} at the peak, measured {_measured(c)}, but "
                f"{_contended(c)}; its cost then depends on that work, not on the guest alone, so the run neither "
                "confirms nor refutes its intervals: measure on a host whose CPUs nothing else uses")
    if _holds_expected(c):
        return (f"the positive control was not detected: {c.instance} (vCPUs capped to {c.cap}%) should change "
                f"throughput by {c.expected:+.1%} at the peak, measured {_measured(c)}: an interval that holds no "
                "change too; this run cannot tell a known cost from noise, so its other 'no change' answers say "
                "little; add iterations")
    return (f"the positive control was not recovered: {c.instance} (vCPUs capped to {c.cap}%) should change "
            f"throughput by {c.expected:+.1%} at the peak ({c.basis}), measured {_measured(c)}; either the guest's "
            "vCPU time was not what limited it, or this run's intervals are not to be trusted")


def _contended(c: Control) -> str:
    return (f"the baseline's vCPU threads waited up to {c.waited:.0f}% of the time for a host CPU there "
            "(other work held it)")


def verdict(c: Control) -> str:
    """The control's check in a few words: recovered, not detected, not recovered, cannot be judged,
    or nothing to check."""
    if not c.change.bounded:
        return "one iteration, nothing to check"
    if not c.recovered and not c.judged:
        return f"cannot be judged: {_contended(c)}"
    return ("recovered" if c.recovered else
            "NOT detected (the interval holds no change too)" if _holds_expected(c) else "NOT recovered")


def control_line(c: Control) -> str:
    if not c.change.bounded:
        return f"positive control {c.instance} (vCPUs capped to {c.cap}%): {verdict(c)}"
    return (f"positive control {c.instance} (vCPUs capped to {c.cap}%): expected {c.expected:+.1%} ({c.basis}), "
            f"measured {_measured(c)}: {verdict(c)}")
