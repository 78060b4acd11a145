"""A guest lost after its agent answered (stopped.GuestLost: it stopped, or its agent went silent while it ran)
is booted once more by the runner, said and kept; any other boot failure is the session's at once, and
a second loss is too (the boots faked: the real loss is the rig's k73 L2,
tests/integration/test_host_boots_in_l1.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_hostboot_run import World
from vmharness.errors import HarnessError
from vmharness.experiment import runner
from vmharness.experiment.boots import Session
from vmharness.guest import session, stopped

LOST = stopped.GuestLost("the guest agent stopped answering after its agent answered, the guest still running "
                         "(guest agent: Guest agent is not responding)\nits console ends with: ...", "")


def _runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            fails: list[HarnessError]) -> tuple[runner.Runner, list[int], list[str]]:
    w = World(tmp_path)
    r = runner.Runner(w.cfg, w.run, w.host.root, w.said.append)
    calls: list[int] = []

    def boot(*_: Any) -> str:
        calls.append(1)
        if fails:
            raise fails.pop(0)
        return "booted"
    monkeypatch.setattr(session, "boot", boot)  # the module the runner calls it in
    return r, calls, w.said


def test_a_guest_lost_after_its_agent_answered_is_booted_once_more_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, calls, said = _runner(tmp_path, monkeypatch, [LOST])
    lost: list[str] = []
    assert r._boot(Session(0, "a", ()), r.cfg.instance[0], lost) == "booted"  # type: ignore[comparison-overlap]
    assert len(calls) == 2 and lost == [LOST.message]
    assert any("a, iteration 0: its guest was lost after its agent answered; booting it once more" in line
               for line in said), said


@pytest.mark.parametrize("fails", [
    [HarnessError("the guest kernel panicked while booting", "")],  # what a second boot would meet again
    [LOST, LOST],  # lost twice: no third boot
], ids=["not-lost", "lost-twice"])
def test_any_other_failure_or_a_second_loss_is_the_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            fails: list[HarnessError]) -> None:
    boots = len(fails)
    r, calls, _ = _runner(tmp_path, monkeypatch, fails)
    with pytest.raises(HarnessError):
        r._boot(Session(0, "a", ()), r.cfg.instance[0], [])
    assert len(calls) == boots
