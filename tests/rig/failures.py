"""What a failed L1 or L2 is, and what its error says: the console's last lines, QEMU's own output,
and the whole console kept in the rig's cache (the next run overwrites it) for whoever reads the log."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from tests.rig.paths import cache_dir
from vmharness.errors import HarnessError

CONSOLE_LINES = 30


class RigError(HarnessError):
    """The rig could not be started or used; `crashed`: QEMU was killed by a signal while L1 booted;
    `stalled`: L1's kernel reported a stalled CPU or task (STALLS) and its agent did not answer (STALLED_BOOT)."""

    crashed = False
    stalled = False


class Wedged(RigError):
    """L1's agent stopped answering while its QEMU ran on and no new boot came. Seen under TCG while an L2
    ran under KVM in an L1 that may kexec: two in four whole runs of test_host_boots_in_l1.py on
    2026-11-30, L1's QEMU at 170% of the two cores, its console silent, L1's run stopped between two of
    its progress lines (docs/testing.md). The cause is not found; a test may start again on a fresh L1."""


class ResetItself(Wedged):
    """L1's QEMU exited with status 0 (under -no-reboot: L1 reset) and L1's console said nothing first of
    what resets it on purpose: a reboot or power-off ("reboot: "), a panic (panic=-1), the rig's init
    giving up. What is left is its CPU resetting itself, a triple fault. Seen once, under TCG, in a
    clean clone of 61d9acf (2026-12-05): L1 in kernel 7.3 ran an L2 under KVM, its console's last line
    KVM's "Unhandled WRMSR(0xc0010007)" from that L2, QEMU's own a VT-d translation fault. Taken as a
    wedge is: the rig under TCG, not the run (a run cannot reset L1 without the kernel saying so)."""


SAID_BEFORE_AN_EXIT = ("reboot: ", "Kernel panic", "rig-init: FATAL")


class L2Lost(Wedged):
    """An L2 under L1's KVM that KVM stopped with an internal error only the rig gives (`lost_under_tcg`).
    The test that saw it stops its L1 first, so that a fresh one is the only L1 running."""


# KVM's "cannot emulate while an event is being delivered" (internal error suberror 3,
# KVM_INTERNAL_ERROR_DELIVERY_EV) on a nested page fault (SVM exit 0x400, QEMU's "extra data[1]") at an
# L2's MMIO write. QEMU's TCG, as L0, gave L1 that exit with an event said to be in delivery, which a real
# CPU gives only for a fault in the delivery itself, not for the instruction the event interrupted. KVM
# in 7.3 refuses to emulate then; 6.1's emulates and goes on. Seen in the kexec test's 7.3 boot on
# 2026-12-03 (bd23ec6) and 2026-12-05 (22afd6b), each time on both of the point's boots, and never
# outside the rig.
TCG_LOST_L2 = ("KVM internal error. Suberror: 3", "extra data[1]: 0x0000000000000400")


def lost_under_tcg(error: str) -> bool:
    """Whether a guest's error (a record's, with its QEMU's log) says it was lost as above."""
    return all(said in error for said in TCG_LOST_L2)


def once_more(exc: Wedged) -> None:
    """Said where a test goes round once more on a fresh L1 because L1 wedged: printed with L1's console, and
    a warning, which the log's summary keeps also where the test then passes (pytest drops its prints)."""
    print(f"L1 wedged; the whole test once more on a fresh L1:\n{exc.message}\n{exc.hint}")
    warnings.warn(f"L1 wedged, the test went round once more on a fresh L1: {exc.message.splitlines()[0]}",
                  stacklevel=2)


def left_wedged(exc: Wedged) -> None:
    """Said where L1 wedged after what a test checked had passed (its clean-up in L1 hung): a warning with
    L1's console, which the log's summary keeps; the test stands, and the next rig module has a fresh L1."""
    print(f"L1 wedged after the test passed; stopped, the next rig module boots a fresh L1:\n{exc.message}\n{exc.hint}")
    warnings.warn(f"L1 wedged after the test passed, and was stopped: {exc.message.splitlines()[0]}", stacklevel=2)


WEDGED = 300.0  # seconds of an unanswering agent, while L1 should be up or booting, taken as Wedged
# A boot of L1 whose kernel said a CPU stalled (RCU's report) and whose agent has not answered this long
# after QEMU started (10-21 s on a quiet machine) is given up and booted once more, not waited on for
# the whole boot timeout: the clean clone of b9491eb (2026-11-30) had one such boot, CPU 1 halted with its
# timer's wake-up never delivered under TCG ("rcu_preempt kthread timer wakeup didn't happen"), its console
# repeating the report every 21 s until the 180 s ran out. The kernel's hung-task report is the same
# verdict: a probe's boot of L1 under QEMU 10.0 (2026-12-01) printed a task's stack, in finit_module,
# at 243 s and never answered (which report printed it is not known: its console was not kept).
STALLS = ("rcu: INFO: rcu_preempt detected stalls", "blocked for more than")
STALLED_BOOT = 60.0


def described(what: str, machine: str, console: str, extra: Sequence[tuple[str, str]], keep_as: str) -> tuple[str, str]:
    """The message and hint of `machine`'s failure: `what`, its console's last CONSOLE_LINES lines and each
    (title, text) of `extra`; the whole console is written to the rig's cache as `keep_as` (the hint says
    where), unless it is empty or cannot be written."""
    tail = "\n".join(console.splitlines()[-CONSOLE_LINES:]) or "(no console output)"
    parts = [what, f"--- last {CONSOLE_LINES} lines of {machine}'s console ---", tail]
    for title, text in extra:
        parts += [f"--- {title} ---", text]
    if not console:
        return "\n".join(parts), ""
    kept = cache_dir() / keep_as
    try:
        kept.write_text(console)
    except OSError:
        return "\n".join(parts), ""
    return "\n".join(parts), f"the whole console is kept in {kept}"
