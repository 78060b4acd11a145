"""L1's timers read while commands run in L1: a CPU of L1 whose timer stays overdue from one look to the
next never took the timer's interrupt, and whatever sleeps on that CPU never wakes. The wait for the
command ends at once, L1 wedged, where it would otherwise be waited for to its own timeout.

Seen beside a load (`stress-ng --cpu 2`, a clean clone of c6ce8f7, 2026-12-04): `host-prepare` in L1
unbound nic1 and then said nothing more for its whole 600 s, with every vCPU of L1 halted, nothing in
service in any local APIC, each timer one-shot, and no task blocked (SysRq w): asleep, not stuck in
the kernel. That is the state of a lost timer under QEMU's threaded TCG (docs/testing.md, 2026-12-01:
a vCPU whose timers never expired, its sleepers queued behind them), later in L1's life than the one
`maxcpus=1` at boot ended. The kernel's own list of each CPU's timers (/proc/timer_list, read through
L1's agent, which a healthy CPU serves) tells it from a machine that is only slow: a timer due LATE_S
or more ago and still queued, with the same expiry, at the next look."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tests.rig.pacing import Pacing
from vmharness.errors import HarnessError

LOOK_S = 30.0  # seconds between looks at L1's timers
LATE_S = 20.0  # a timer this overdue at two looks in a row was never fired
NOTED_S = 1.0  # a timer this overdue at a look is noted (TimerWatch's `note`), lost or not
_NS = 1e9
_NOW = re.compile(r"^now at (\d+) nsecs$", re.MULTILINE)
_CPU = re.compile(r"^cpu: (\d+)$")
_EXPIRES = re.compile(r"^ # expires at \d+-(\d+) nsecs \[in -?\d+ to (-?\d+) nsecs\]")
_DEVICE = re.compile(r"^Per CPU device: (\d+)$")
_NEXT = re.compile(r"^ next_event:\s+(\d+) nsecs$")


@dataclass(frozen=True)
class Late:
    """A CPU's most overdue timer: its expiry as the kernel keeps it (ns of the timer's own clock, which
    names the timer from one look to the next) and how long ago it was due (s)."""

    cpu: int
    due_ns: int
    late_s: float


def overdue(timer_list: str) -> dict[int, Late]:
    """Each CPU's most overdue timer in /proc/timer_list's text, by CPU: its queued hrtimers (their hard
    expiry, against the clock of each timer's base, as the kernel prints it: `in -N` is N ns ago) and its
    tick device's next event (the monotonic clock of `now at`). A CPU with no timer in the past is not in
    it; a text without its `now at` line gives nothing."""
    now = _NOW.search(timer_list)
    if now is None:
        return {}
    now_ns = int(now.group(1))
    worst: dict[int, Late] = {}
    cpu: int | None = None
    for line in timer_list.splitlines():
        if (m := _CPU.match(line) or _DEVICE.match(line)) is not None:
            cpu = int(m.group(1))
            continue
        if line.startswith(("Tick Device", "Broadcast device")):
            cpu = None
        if cpu is None:
            continue
        if (m := _EXPIRES.match(line)) is not None:
            late = Late(cpu, int(m.group(1)), -int(m.group(2)) / _NS)
        elif (m := _NEXT.match(line)) is not None:
            late = Late(cpu, int(m.group(1)), (now_ns - int(m.group(1))) / _NS)
        else:
            continue
        if late.late_s > 0 and late.late_s > worst.get(cpu, Late(cpu, 0, 0.0)).late_s:
            worst[cpu] = late
    return worst


class TimerLost(Exception):
    """A timer of L1's CPU `late.cpu` stayed overdue over two looks."""

    def __init__(self, late: Late) -> None:
        super().__init__(f"cpu{late.cpu} of L1 has a timer due {late.late_s:.0f} s ago (at "
                         f"{late.due_ns / _NS:.3f} s of its clock) that it never took: its timer's interrupt was lost")
        self.late = late


class TimerWatch:
    """Called now and then while a command runs in L1 (qga's exec loop): every `every` s it reads L1's
    /proc/timer_list with `read`, and raises TimerLost for a CPU whose timer was LATE_S overdue at the
    look before and still is, with the same expiry. A read that fails is passed over (the agent's own
    silence is the exec loop's to judge). `note` is given each CPU's timer NOTED_S late or more at a look:
    how often L1's timers come late at all, which a timer lost for good is the extreme of."""

    def __init__(self, read: Callable[[], str], every: float = LOOK_S, late: float = LATE_S,
                 note: Callable[[Late], None] = lambda late: None) -> None:
        self._read, self._pacing, self._late, self._note = read, Pacing(every), late, note
        self._seen: dict[int, int] = {}

    def __call__(self) -> None:
        if not self._pacing.due():
            return
        try:
            text = self._read()
        except (HarnessError, OSError):  # a look skipped, never the command's end
            return
        found = overdue(text)
        for t in found.values():
            if t.late_s >= NOTED_S:
                self._note(t)
        late = {c: t for c, t in found.items() if t.late_s >= self._late}
        lost = [t for c, t in sorted(late.items()) if self._seen.get(c) == t.due_ns]
        self._seen = {c: t.due_ns for c, t in late.items()}
        if lost:
            raise TimerLost(lost[0])
