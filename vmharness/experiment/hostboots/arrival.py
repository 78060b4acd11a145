"""The check on arrival in a host boot: what the host reports is what was asked, or the round is not
measured. A kexec that failed, a reboot by someone else, a watchdog or a boot loader's fallback leave
the host in another kernel or command line; measuring there would put the numbers under the wrong label.

Compared with what was asked: the running release (/proc/sys/kernel/osrelease) with the one the
kernel's bzImage header names, /proc/cmdline with the line kexec was given, and the boot id with the
one read before the switch (the same id: the host never rebooted). Compared with the host boot's first
visit, when this is a later one: the vulnerability verdicts, the microcode revision and every KVM
parameter (host/inspect/hoststate.py reads them all), which one kernel and command line on one machine
give alike; a difference means something else changed the host between its visits."""

from __future__ import annotations

from typing import Any

from vmharness.experiment.hostboots.target import Target, running_release
from vmharness.host.inspect import hoststate
from vmharness.system.root import HostRoot

SAME_ON_EVERY_VISIT = ("vulnerabilities", "microcode", "kvm")


def facts(root: HostRoot) -> dict[str, Any]:
    """What the host reports now: hoststate's facts and the running release."""
    return {**hoststate.read(root), "release": running_release(root)}


def problems(target: Target, now: dict[str, Any], boot_before: str | None,
             first_visit: dict[str, Any] | None) -> list[str]:
    """How the host now differs from what `target` asked (empty: it is the host boot asked for)."""
    out = []
    if now.get("release") != target.release:
        out.append(f"the host runs the kernel {str(now.get('release'))[:80]!r}, not {target.release!r}")
    if (now.get("cmdline") or "").strip() != target.cmdline:
        out.append(f"its command line is {str(now.get('cmdline'))[:200]!r}, not {target.cmdline[:200]!r}")
    if boot_before is not None and now.get("boot_id") == boot_before:
        out.append(f"its boot id is still {boot_before}: it did not boot again")
    if first_visit is not None:
        for key in SAME_ON_EVERY_VISIT:
            if now.get(key) != first_visit.get(key):
                out.append(f"its {key} differ from the first visit of this host boot")
    return out
