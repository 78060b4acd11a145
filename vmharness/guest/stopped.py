"""What is said of a guest that no longer runs: one libvirt stopped (and why, in its words), one whose
QEMU halted it while it stays active (paused on a KVM internal error, an I/O error, a panic), and one
whose agent went silent while it ran. Each comes with the ends of its console and of its QEMU's log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import libvirt

from vmharness.errors import HarnessError
from vmharness.guest import agent
from vmharness.guest.running import console_tail
from vmharness.system.machine import Machine


class GuestLost(HarnessError):
    """A guest lost after its agent answered: it stopped or halted, or its agent went silent while it ran
    (a guest that reset, an agent that ended). Unlike a kernel that panics or never answers, what a second
    boot of the same guest may not meet (experiment/runner.py boots it once more)."""


# Seconds a failed step waits for libvirt to report a stopped guest: the agent's "disappeared while
# executing command" can come before the domain's end (a guest destroyed from outside at its agent's first
# answer was once still "being shut down" when the error came, active to libvirt, and stopped within 2 s).
SETTLE = 2.0


def _is_active(dom: libvirt.virDomain) -> bool:
    """Whether libvirt has the domain active (a paused one is); one it cannot tell of counts as stopped."""
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError:
        return False


def runs(dom: libvirt.virDomain) -> bool:
    """Whether the guest runs on: active to libvirt, and not halted (a paused guest is active too)."""
    return _is_active(dom) and halted(dom) is None


def _stops_within(dom: libvirt.virDomain, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _is_active(dom):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextmanager
def said_if_it_stops(dom: libvirt.virDomain, log: str, machine: Machine, when: str) -> Iterator[None]:
    """An error in the block from a guest that is no longer running becomes `stopped`'s: an agent's
    "domain is not running" alone said nothing of why (an L2 in the rig's L1 under 7.3 that ended after
    its agent answered, in a clean clone on 2026-12-03). One that libvirt keeps active but halted is said
    as halted, with libvirt's reason and its QEMU's log (the same L2, in a later clone, failed with the
    agent's "domain is not running" while libvirt called it active, which libvirt says of any state but
    running: which one was not read then). An agent
    that stops answering while its guest runs (libvirt: "Guest agent is not responding", once the agent's
    channel closed or a command timed out: a guest that reset, or the agent's process ended) is said with
    the console's end as well."""
    try:
        yield
    except HarnessError as exc:
        if _stops_within(dom, SETTLE):
            raise stopped(dom, log, machine, when, GuestLost) from exc
        if (why := halted(dom)) is not None:
            raise halted_error(dom, log, machine, when, why, GuestLost) from exc
        if agent.SAID not in exc.message:
            raise
        raise GuestLost(f"the guest agent stopped answering {when}, the guest still running ({exc.message}); "
                        "its console ends with:\n" + indent(console_tail(log, machine)),
                        "a guest that reset or whose agent ended says so on its console; the whole console "
                        "log is " + log) from exc


def stopped(dom: libvirt.virDomain, log: str, machine: Machine, when: str,
            kind: type[HarnessError] = HarnessError) -> HarnessError:
    """The error (a `kind`) for a guest that stopped `when`: libvirt's reason, its console's and its QEMU
    log's ends."""
    return _said(f"the guest stopped {when} ({_why_stopped(dom)})", dom, log, machine, kind)


def halted_error(dom: libvirt.virDomain, log: str, machine: Machine, when: str, why: str,
                 kind: type[HarnessError] = HarnessError) -> HarnessError:
    """The error for a guest `halted` found halted `when`: its QEMU's log at more length, where QEMU's
    own words on a KVM internal error come with a register dump of 20-odd lines."""
    return _said(f"the guest halted {when} ({why})", dom, log, machine, kind, qemu_lines=30)


def _said(what: str, dom: libvirt.virDomain, log: str, machine: Machine, kind: type[HarnessError],
          qemu_lines: int = 6) -> HarnessError:
    return kind(f"{what}; its console ends with:\n" + indent(console_tail(log, machine))
                + _qemu_log_tail(dom, machine, qemu_lines),
                "check the kernel and cmdline; the whole console log is " + log)


# libvirt's reason for a domain it has stopped. Every lifecycle event of the harness's domains is
# "destroy" (domain.py), so a guest that resets (a reboot, a panic with panic=N, a triple fault) is
# stopped too, as libvirt reports it: "shutdown" through QEMU's -no-reboot, "destroyed" where libvirt
# handles the reset itself.
_SHUTOFF = {
    libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN: "libvirt: shut down, by the guest's power-off or reset",
    libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED: "libvirt: destroyed, on the guest's reset or from outside",
    libvirt.VIR_DOMAIN_SHUTOFF_CRASHED: "libvirt: its QEMU ended unexpectedly (killed, or crashed)",
    libvirt.VIR_DOMAIN_SHUTOFF_FAILED: "libvirt: its QEMU failed to start",
    libvirt.VIR_DOMAIN_SHUTOFF_DAEMON: "libvirt: stopped by the daemon",
}


def _why_stopped(dom: libvirt.virDomain) -> str:
    try:
        state, reason = dom.state()
    except libvirt.libvirtError as exc:
        return f"libvirt did not say why: {str(exc).strip()}"
    if state != libvirt.VIR_DOMAIN_SHUTOFF:
        return f"libvirt: state {state}, reason {reason}"
    return _SHUTOFF.get(reason, f"libvirt: shut off, reason {reason}")


# A domain libvirt keeps active that runs no more: its QEMU stopped its vCPUs, or it is being shut down
# and its QEMU has not ended (libvirt's "domain is not running" to an agent command, as if it had stopped).
# QEMU stops a guest on a KVM internal error or emulation failure (libvirt's reason: unknown; QEMU's log has
# the register dump), on a disk's I/O error, and on a panic a pvpanic device reports with on_crash=preserve.
_PAUSED = {
    libvirt.VIR_DOMAIN_PAUSED_UNKNOWN: "libvirt: paused for a reason it does not know (QEMU stops a guest so "
                                       "on a KVM internal error or emulation failure: see its log)",
    libvirt.VIR_DOMAIN_PAUSED_USER: "libvirt: paused by a user",
    libvirt.VIR_DOMAIN_PAUSED_IOERROR: "libvirt: paused on a disk's I/O error",
    libvirt.VIR_DOMAIN_PAUSED_WATCHDOG: "libvirt: paused by its watchdog",
    libvirt.VIR_DOMAIN_PAUSED_CRASHED: "libvirt: paused on the guest's panic",
}
# Pauses that are a step of libvirt's own, not a halt: the start before the vCPUs run, a shutdown.
_PASSING = {libvirt.VIR_DOMAIN_PAUSED_STARTING_UP, libvirt.VIR_DOMAIN_PAUSED_SHUTTING_DOWN}


def halted(dom: libvirt.virDomain) -> str | None:
    """libvirt's words for an active domain whose guest runs no more; None for one that runs (or that
    libvirt no longer knows, or has stopped: `stopped` says those)."""
    try:
        state, reason = dom.state()
    except libvirt.libvirtError:
        return None
    if state == libvirt.VIR_DOMAIN_PAUSED and reason not in _PASSING:
        return _PAUSED.get(reason, f"libvirt: paused, reason {reason}")
    if state == libvirt.VIR_DOMAIN_SHUTDOWN:
        return ("libvirt: being shut down, its QEMU not yet ended (the guest powered off or reset, or its "
                "domain was destroyed)")
    if state == libvirt.VIR_DOMAIN_CRASHED:
        return f"libvirt: crashed, reason {reason}"
    if state == libvirt.VIR_DOMAIN_PMSUSPENDED:
        return "libvirt: suspended by the guest's power management"
    return None


# Where libvirt's system daemon keeps each domain's QEMU log: what QEMU printed to its stderr, and the
# daemon's line on why it stopped it ("shutting down, reason=..."; "terminating on signal ...").
QEMU_LOGS = "/var/log/libvirt/qemu"


def _qemu_log_tail(dom: libvirt.virDomain, machine: Machine, lines: int = 6) -> str:
    """The log's last lines past the QEMU command line libvirt wrote at the start (its lines end in a
    backslash, the last one is `-msg ...`)."""
    res = machine.run(["tail", "-n", str(lines + 34), f"{QEMU_LOGS}/{dom.name()}.log"], timeout=30, check=False)
    said = [line[:300] for line in res.stdout.replace("\r", "").splitlines()
            if line.strip() and not line.endswith("\\") and not line.startswith("-")] if res.ok else []
    return "\nits QEMU's log ends with:\n" + indent("\n".join(said[-lines:])) if said else ""


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines()) or "    (empty)"
