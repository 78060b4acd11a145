"""A command in L1 whose kernel reports a task blocked for four minutes ends as L1 wedged (stopped) at
once, not at the command's timeout (tests/rig/console_watch.py); the first report alone, and reports
printed before the watch began, leave the command to run to its own end. The agent is a socket that speaks
the agent's framing and never sees the command end; L1's console is a file the test writes, as QEMU does."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.rig import failures
from tests.rig import rig as rig_module
from tests.rig.console_watch import ConsoleWatch, Stalled
from tests.rig.qga import AgentError
from tests.unit.fake_agent import fake_agent

BOOT = "[    4.05] e1000e 0000:00:02.0 eth0: Intel(R) PRO/1000 Network Connection\n"
EARLIER = "[  605.11] INFO: task modprobe:311 blocked for more than 483 seconds.\n"  # before the watch began
FIRST = "[  363.43] INFO: task python:795 blocked for more than 120 seconds.\n"
SECOND = "[  484.26] INFO: task python:795 blocked for more than 241 seconds.\n"
STACK = "[  484.27]  rcu_barrier+0x1f6/0x2d0\n"


def _written_later(console: Path, *parts: str) -> threading.Thread:
    def write() -> None:
        for part in parts:
            time.sleep(0.3)
            try:
                with console.open("a") as f:
                    f.write(part)
            except FileNotFoundError:  # L1 stopped: its folder is gone with its console
                return

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("said", [(FIRST, STACK, SECOND, STACK), (FIRST, STACK)], ids=["reported-twice", "once"])
def test_a_task_blocked_for_four_minutes_wedges_l1_at_once_and_one_report_does_not(
        stand_in_rig: rig_module.Rig, tmp_path: Path, said: tuple[str, ...]) -> None:
    rig = stand_in_rig
    console = tmp_path / "console.log"
    console.write_text(BOOT + EARLIER)
    rig._watches = (ConsoleWatch(console, every=0.05),)
    began = time.monotonic()
    with fake_agent(tmp_path / "agent.sock", {"exited": False}):  # a command that never ends
        rig.agent.connect(timeout=10)
        writer = _written_later(console, *said)
        if SECOND in said:
            with pytest.raises(failures.Wedged, match=r"(?s)blocked for more than 241 seconds.*host-prepare"):
                rig.run(["vmharness", "host-prepare", "--bdf", "0000:81:00.0"], timeout=600)
            assert not rig.usable and rig.qemu.wait(timeout=10) != 0  # stopped, long before the 600 s
            assert time.monotonic() - began < 60
        else:
            with pytest.raises(AgentError, match=r"did not finish within 3 s") as exc:
                rig.run(["vmharness", "host-prepare", "--bdf", "0000:81:00.0"], timeout=3)
            assert not isinstance(exc.value, failures.Wedged) and rig.usable
        writer.join()


def test_a_report_cut_between_two_looks_is_read_whole(tmp_path: Path) -> None:
    console = tmp_path / "console.log"
    console.write_text(BOOT)
    watch = ConsoleWatch(console, every=0.0)
    with console.open("a") as f:
        f.write(SECOND[:30])
    watch()  # half a line: kept for the next look
    with console.open("a") as f:
        f.write(SECOND[30:])
    with pytest.raises(Stalled, match="python:795 blocked for more than 241 seconds"):
        watch()
    watch()  # said once: the next look starts after it
