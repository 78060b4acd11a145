"""L1's timers read while a command runs in it (tests/rig/timer_watch.py): a CPU whose timer stays overdue
over two looks wedges L1 at once; a timer late at one look only, or one fired and set again between the
looks (a machine that is only slow), does not. The parser is tried on this machine's own
/proc/timer_list as well; L1's is read for real in tests/integration/test_rig.py."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.rig import failures
from tests.rig import rig as rig_module
from tests.rig.timer_watch import LATE_S, TimerLost, TimerWatch, overdue
from tests.unit.fake_agent import fake_agent
from vmharness.errors import HarnessError

NOW = 300_000_000_000  # L1's clock at the read: 300 s into its boot


def timer_list(cpu1_due: int, now: int = NOW) -> str:
    """/proc/timer_list as 6.1 prints it (cut to what matters) for two CPUs: cpu0's timers ahead, cpu1's
    tick and a sleeper's wake-up due at `cpu1_due`; a CLOCK_REALTIME timer (its expiry in that clock) and
    the broadcast device's stale next event, which are not late."""
    def sleeper(due: int) -> str:
        return (" #0: <00000000a1b2c3d4>, hrtimer_wakeup, S:01\n"
                f" # expires at {due}-{due + 50_000} nsecs [in {due - now} to {due + 50_000 - now} nsecs]\n")
    realtime = 1_764_800_000_000_000_000
    return (f"Timer List Version: v0.9\nHRTIMER_MAX_CLOCK_BASES: 8\nnow at {now} nsecs\n\n"
            f"cpu: 0\n clock 0:\n  .base:       00000000deadbeef\n  .index:      0\nactive timers:\n"
            f"{sleeper(now + 4_000_000)}"
            f" clock 1:\n  .index:      1\nactive timers:\n #0: <0000000011223344>, hrtimer_wakeup, S:01\n"
            f" # expires at {realtime}-{realtime} nsecs [in 5000000 to 5000000 nsecs]\n"
            f"  .expires_next   : {now + 4_000_000} nsecs\n\n"
            f"cpu: 1\n clock 0:\n  .index:      0\nactive timers:\n{sleeper(cpu1_due)}"
            f"  .expires_next   : {cpu1_due} nsecs\n\n"
            f"{device('Broadcast device', 'hpet', 1000)}{device('Per CPU device: 0', 'lapic', now + 4_000_000)}"
            f"{device('Per CPU device: 1', 'lapic', cpu1_due)}")


def device(title: str, name: str, next_event: int) -> str:
    return f"Tick Device: mode:     1\n{title}\nClock Event Device: {name}\n next_event:     {next_event} nsecs\n\n"


def test_a_cpu_whose_timer_is_in_the_past_is_said_with_how_late_and_the_others_are_not() -> None:
    late = overdue(timer_list(cpu1_due=NOW - 25_000_000_000))
    assert list(late) == [1]
    assert late[1].late_s == pytest.approx(25.0, abs=0.01)
    assert overdue(timer_list(cpu1_due=NOW + 1_000_000)) == {}
    assert overdue("no timer list at all") == {}


def _later(text: str, seconds: int) -> str:
    """`text` read `seconds` later with no timer fired meanwhile: `now at` on, each `in` back."""
    shift = seconds * 1_000_000_000
    text = re.sub(r"^now at (\d+)", lambda m: f"now at {int(m.group(1)) + shift}", text, flags=re.M)
    return re.sub(r"\[in (-?\d+) to (-?\d+) nsecs\]",
                  lambda m: f"[in {int(m.group(1)) - shift} to {int(m.group(2)) - shift} nsecs]", text)


def test_this_machines_own_timer_list_has_no_cpu_late_until_its_timers_are_left_a_minute() -> None:
    text = Path("/proc/timer_list").read_text()
    cpus = {int(c) for c in re.findall(r"^cpu: (\d+)$", text, flags=re.M)}
    assert cpus and all(t.late_s < LATE_S for t in overdue(text).values())
    # a minute on with no timer fired: the reading CPU's tick, due within milliseconds, is a minute late,
    # and no CPU's timer more than that
    left = overdue(_later(text, 60))
    assert left and set(left) <= cpus and max(t.late_s for t in left.values()) > 59, left
    assert all(t.late_s < 61 for t in left.values()), left



@pytest.mark.parametrize(("looks", "lost"), [
    ([NOW - 25_000_000_000, NOW - 25_000_000_000], True),  # the same timer late at both looks
    ([NOW + 1_000_000, NOW - 25_000_000_000], False),  # late at the second look only
    ([NOW - 25_000_000_000, NOW - 26_000_000_000], False),  # fired and set again between the looks
    ([NOW - 5_000_000_000, NOW - 5_000_000_000], False),  # late, but less than LATE_S
], ids=["lost", "late-once", "fired-between", "slow"])
def test_a_timer_overdue_at_two_looks_with_the_same_expiry_is_lost(looks: list[int], lost: bool) -> None:
    texts = [timer_list(due) for due in looks]
    watch = TimerWatch(lambda: texts.pop(0), every=0.0)
    watch()
    if lost:
        with pytest.raises(TimerLost, match=r"cpu1 of L1 has a timer due 25 s ago .* never took"):
            watch()
    else:
        watch()


def test_a_failed_read_is_a_look_skipped() -> None:
    def read() -> str:
        raise HarnessError("guest agent guest-file-open failed")
    TimerWatch(read, every=0.0)()


def test_a_lost_timer_wedges_l1_at_once(stand_in_rig: rig_module.Rig, tmp_path: Path) -> None:
    rig = stand_in_rig
    rig._watches = (TimerWatch(rig._timer_list, every=0.05),)
    stuck = timer_list(cpu1_due=NOW - 25_000_000_000).encode()
    began = time.monotonic()
    with fake_agent(tmp_path / "agent.sock", {"exited": False}, {"/proc/timer_list": [stuck]}):
        rig.agent.connect(timeout=10)
        with pytest.raises(failures.Wedged) as exc:
            rig.run(["vmharness", "host-prepare", "--bdf", "0000:81:00.0"], timeout=600)
    assert "cpu1 of L1 has a timer due 25 s ago" in exc.value.message
    assert "host-prepare" in exc.value.message and "cpu1 25.0 s late" in exc.value.message
    assert not rig.usable and rig.qemu.wait(timeout=10) != 0 and time.monotonic() - began < 60


@pytest.mark.parametrize(("late_s", "wedged"), [(300, True), (25, False)])
def test_a_sleep_that_never_ended_is_l1s_where_a_timer_is_a_minute_late(stand_in_rig: rig_module.Rig, tmp_path: Path,
                                                                        late_s: int, wedged: bool) -> None:
    rig = stand_in_rig
    text = timer_list(cpu1_due=NOW - late_s * 1_000_000_000).encode()
    with fake_agent(tmp_path / "agent.sock", {"exited": True, "exitcode": 0}, {"/proc/timer_list": [text]}):
        rig.agent.connect(timeout=10)
        if wedged:
            with pytest.raises(failures.Wedged, match=r"^the kill never came: cpu1 of L1 has a timer due 300 s ago"):
                rig.check_timers("the kill never came")
            assert not rig.usable
        else:
            rig.check_timers("the kill never came")
            assert rig.usable


def test_each_timer_late_by_a_second_or_more_is_noted_lost_or_not() -> None:
    noted: list[tuple[int, float]] = []
    texts = [timer_list(NOW - 500_000_000), timer_list(NOW - 3_000_000_000)]
    watch = TimerWatch(lambda: texts.pop(0), every=0.0, note=lambda t: noted.append((t.cpu, round(t.late_s, 1))))
    watch()
    watch()
    assert noted == [(1, 3.0)]  # half a second late is not noted
