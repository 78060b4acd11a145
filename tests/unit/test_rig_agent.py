"""The rig's agent client against an agent that goes silent: a command whose status is never answered
ends after the client's `silence`, saying which request went unanswered, not after the command's whole
timeout (a quiet clean clone's nested run once waited 40 minutes on one poll). The agent here is a
socket that speaks the agent's framing; the real one is tested in tests/integration/test_rig.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.rig import failures, topology
from tests.rig import rig as rig_module
from tests.rig.qga import AgentError, AgentSilent, GuestAgent
from tests.unit.fake_agent import fake_agent
from vmharness.system.proc import Result


@pytest.mark.parametrize("answer_status", [True, False], ids=["answering", "silent"])
def test_a_silent_agent_ends_the_command_after_the_silence_not_its_timeout(tmp_path: Path,
                                                                          answer_status: bool) -> None:
    path = tmp_path / "agent.sock"
    agent = GuestAgent(path, silence=1.0)
    began = time.monotonic()
    with fake_agent(path, {"exited": True, "exitcode": 0, "out-data": "b2sK"} if answer_status else None):
        agent.connect(timeout=10)
        try:
            if answer_status:
                assert agent.exec(["true"], env={}, timeout=600).stdout == "ok\n"
            else:
                with pytest.raises(AgentError, match="did not answer guest-exec-status within 1 s"):
                    agent.exec(["sleep", "1000"], env={}, timeout=600)
        finally:
            agent.close()
    assert time.monotonic() - began < 60  # the command's own 600 s would be a hang


@pytest.fixture()
def quick_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """await_boot's looks every few hundredths of a second instead of every 1-2 s: its timeouts here are
    a second or two (a margin of over a second for a loaded machine), the order of what it sees
    unchanged."""
    monkeypatch.setattr(rig_module, "BOOT_LOOK_S", 0.02)
    monkeypatch.setattr(rig_module, "SILENT_RETRY_S", 0.02)


def _qemu_that_quits(monkeypatch: pytest.MonkeyPatch) -> subprocess.Popen[bytes]:
    """A stand-in for L1's QEMU that QMP's quit ends, as the real one's does (a wedged rig is stopped)."""
    qemu = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(rig_module, "quit_qemu", lambda path, timeout: qemu.kill())
    return qemu


class _Unanswered:
    """An agent that never answers: every request times out."""

    def sync(self, timeout: float) -> None:
        raise AgentError("the guest agent did not answer guest-sync")

    def read_file(self, path: str, *, timeout: float) -> bytes:
        raise AgentError(f"the guest agent did not answer guest-file-open {path}")

    def close(self) -> None:
        pass


class _Answering(_Unanswered):
    def sync(self, timeout: float) -> None:
        pass


@pytest.mark.parametrize(("silent", "wedged"), [(True, 0.2), (True, 100.0), (False, 0.2)],
                         ids=["silent", "silent-past-the-timeout", "answering"])
@pytest.mark.usefixtures("quick_looks")
def test_an_l1_whose_agent_stays_silent_is_wedged_and_one_that_answers_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent: bool, wedged: float) -> None:
    """await_boot: an agent silent for WEDGED seconds while QEMU runs is Wedged (said with L1's console),
    long before the boot's own timeout, and so is one silent until that timeout (a boot after a reset
    that hung); one that answers from the same boot runs into that timeout, not Wedged."""
    monkeypatch.setattr(rig_module, "WEDGED", wedged)
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path)
    (tmp_path / "console.log").write_text("[   18.99] hrtimer: interrupt took 13725530 ns\n")
    qemu = _qemu_that_quits(monkeypatch)
    try:
        rig = rig_module.Rig(None, topology.Files(tmp_path), qemu)  # type: ignore[arg-type]
        rig.agent = _Unanswered() if silent else _Answering()  # type: ignore[assignment]
        monkeypatch.setattr(rig, "boot_id", lambda timeout=60.0: "the same boot")
        began = time.monotonic()
        if silent:
            said = r"not answered for 0\.2 s" if wedged < 1.5 else r"within 1\.5 s, its agent silent throughout"
            with pytest.raises(failures.Wedged, match=rf"(?s){said}.*hrtimer"):
                rig.await_boot("the same boot", timeout=1.5)
        else:
            with pytest.raises(failures.RigError, match=r"did not boot again within 1\.5 s") as exc:
                rig.await_boot("the same boot", timeout=1.5)
            assert not isinstance(exc.value, failures.Wedged)
        assert time.monotonic() - began < 30
    finally:
        qemu.kill()
        qemu.wait()
        rig._stopped = True


@pytest.mark.parametrize("going_says", ["agent gone", "run ended"])
@pytest.mark.usefixtures("quick_looks")
def test_an_agent_that_goes_quiet_under_going_decides_nothing_but_a_run_that_ended_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, going_says: str) -> None:
    """await_boot: kexec can come between the boot id and `going`'s own question, whose agent then does
    not answer: that is not the run's end, and the next round finds the new boot. `going`'s
    AssertionError (the run ended without a reboot) still ends the wait."""
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path)
    qemu = subprocess.Popen(["sleep", "60"])
    boots = iter(["the same boot", "the same boot", "a new boot"])
    try:
        rig = rig_module.Rig(None, topology.Files(tmp_path), qemu)  # type: ignore[arg-type]
        rig.agent = _Answering()  # type: ignore[assignment]
        monkeypatch.setattr(rig, "boot_id", lambda timeout=60.0: next(boots))

        def going() -> None:
            if going_says == "agent gone":
                raise AgentError("the guest agent did not answer guest-exec-status within 59.6 s")
            raise AssertionError("the run ended without switching the host")
        if going_says == "agent gone":
            assert rig.await_boot("the same boot", timeout=60.0, going=going) < 30
        else:
            with pytest.raises(AssertionError, match="without switching"):
                rig.await_boot("the same boot", timeout=60.0, going=going)
    finally:
        qemu.kill()
        qemu.wait()
        rig._stopped = True


class _SilentExec(_Answering):
    def __init__(self, waited: float) -> None:
        self.waited = waited

    def exec(self, argv: list[str], *, env: dict[str, str], timeout: float, input: bytes | None = None,
             watch: object = None) -> None:
        raise AgentSilent(f"the guest agent did not answer guest-exec-status within {self.waited:g} s", self.waited)


@pytest.mark.parametrize("silence", [300.0, 60.0, None], ids=["wedged", "silent-a-while", "answering"])
def test_a_command_whose_agent_goes_silent_fails_with_l1s_console(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silence: float | None) -> None:
    """Rig.run: an agent that stops answering mid-command fails with the command and L1's console tail,
    and the whole console is kept: the only trace of why L1 went quiet (a nested run's host-prepare,
    docs/testing.md). Silent for WEDGED seconds, L1 is Wedged: stopped at once (its QEMU spun on the two
    cores), and every later command fails at once with the first verdict, not after a silence of its own
    (CI's nested run of d986ba9 waited out two). A shorter silence is an AgentError and L1 stays up; an
    answering agent gives its result, no console."""
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path / "kept")
    (tmp_path / "kept").mkdir()
    (tmp_path / "l1").mkdir()  # the rig's own folder, which stopping it removes
    (tmp_path / "l1" / "console.log").write_text("[  812.5] watchdog: BUG: soft lockup - CPU#1 stuck for 22s!\n")
    qemu = _qemu_that_quits(monkeypatch)
    try:
        rig = rig_module.Rig(None, topology.Files(tmp_path / "l1"), qemu)  # type: ignore[arg-type]

        class _Done(_Answering):
            def exec(self, argv: list[str], **_: object) -> object:
                return Result(tuple(argv), 0, "ok\n", "")
        rig.agent = _Done() if silence is None else _SilentExec(silence)  # type: ignore[assignment]
        if silence is None:
            assert rig.run(["true"], timeout=60).stdout == "ok\n"
            assert not (tmp_path / "kept" / "last-failed-console.log").exists()
            return
        said = rf"(?s)within {silence:g} s \(running vmharness host-prepare.*soft lockup"
        with pytest.raises(AgentError if silence < failures.WEDGED else failures.Wedged, match=said) as exc:
            rig.run(["vmharness", "host-prepare", "--hugepages", "384M"], timeout=600)
        assert "last-failed-console.log" in exc.value.hint
        assert "soft lockup" in (tmp_path / "kept" / "last-failed-console.log").read_text()
        if silence < failures.WEDGED:
            assert qemu.poll() is None and not isinstance(exc.value, failures.Wedged)
            return
        assert qemu.wait(timeout=30) is not None  # stopped with the verdict
        began = time.monotonic()
        with pytest.raises(failures.Wedged, match=r"L1 wedged earlier and was stopped: the guest agent did not"):
            rig.run(["vmharness", "host-restore"], timeout=300)
        assert time.monotonic() - began < 5
    finally:
        qemu.kill()
        qemu.wait()
        rig._stopped = True


class _NeverSyncs(_Unanswered):
    def connect(self, timeout: float) -> None:
        pass


@pytest.mark.parametrize("console", ["stalled", "hung", "booting"])
def test_a_boot_whose_kernel_reports_a_stall_is_given_up_early_and_booted_once_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, console: str) -> None:
    """An L1 boot whose console has RCU's stall report or the hung-task report and whose agent stays
    silent past STALLED_BOOT is a `stalled` failure, long before the boot's timeout, and Rig.start boots
    once more (once); a boot without either report waits for its whole timeout and is not booted again."""
    monkeypatch.setattr(rig_module, "STALLED_BOOT", 0.5)
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path)
    said = {"stalled": "[   24.578579] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n",
            "hung": "[  242.912105] INFO: task modprobe:97 blocked for more than 120 seconds.\n",
            "booting": "[    6.645502] Run /init as init process\n"}[console]
    (tmp_path / "console.log").write_text(said)
    qemu = subprocess.Popen(["sleep", "60"])
    try:
        rig = rig_module.Rig(None, topology.Files(tmp_path), qemu)  # type: ignore[arg-type]
        rig.agent = _NeverSyncs()  # type: ignore[assignment]
        began = time.monotonic()
        with pytest.raises(failures.RigError) as exc:
            rig._wait_for_agent(began + 3.0, 3.0)
        assert exc.value.stalled is (console != "booting")
        assert (time.monotonic() - began < 2.5) is (console != "booting")
    finally:
        qemu.kill()
        qemu.wait()
        rig._stopped = True

    boots: list[str] = []

    def boot(timeout: float, host_boots: bool, kern: object, append: str, also: object) -> str:
        boots.append("boot")
        if len(boots) == 1 or console == "booting":
            raise exc.value
        return "the second boot"
    monkeypatch.setattr(rig_module.Rig, "_boot", boot)
    if console != "booting":
        assert str(rig_module.Rig.start(timeout=3.0)) == "the second boot" and len(boots) == 2
    else:
        with pytest.raises(failures.RigError, match="did not answer within 3 s"):
            rig_module.Rig.start(timeout=3.0)
        assert len(boots) == 1


class _Recorded(_Answering):
    """An agent whose exec fails as `error`, and which records each file it is asked for (an empty timer
    list: no timer overdue)."""

    def __init__(self, error: AgentError) -> None:
        self.error, self.asked = error, list[str]()

    def exec(self, argv: list[str], **_: object) -> None:
        raise self.error

    def read_file(self, path: str, *, timeout: float) -> bytes:
        self.asked.append(path)
        return b""


@pytest.mark.parametrize(("error", "timers"), [
    (AgentSilent("the guest agent did not answer guest-exec-status within 60 s", 60.0),
     "not read: L1's agent is silent"),
    (AgentError("sleep 1000 ran past its 600 s"), "none"),
], ids=["silent", "past-its-time"])
def test_l1s_timers_are_asked_of_an_agent_that_answers_and_not_of_a_silent_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: AgentError, timers: str) -> None:
    """A failure says L1's overdue timers, read through its agent; a silent agent is not asked, since
    the question would only wait out TIMER_LIST_WAIT (20 s) on every failure that a silence caused."""
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path)
    qemu = _qemu_that_quits(monkeypatch)
    try:
        rig = rig_module.Rig(None, topology.Files(tmp_path), qemu)  # type: ignore[arg-type]
        rig.agent = agent = _Recorded(error)  # type: ignore[assignment]
        with pytest.raises(AgentError) as exc:
            rig.run(["sleep", "1000"], timeout=600)
        assert f"--- {rig_module.TIMERS} ---\n{timers}" in exc.value.message, exc.value.message
        assert agent.asked == ([] if isinstance(error, AgentSilent) else ["/proc/timer_list"])
    finally:
        qemu.kill()
        qemu.wait()
        rig._stopped = True
