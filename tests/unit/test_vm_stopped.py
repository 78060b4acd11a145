"""What `vm up` says of a guest that stopped while booting: libvirt's reason, read from the domain
(a fake: the real one, a QEMU killed mid-boot, is tests/integration/test_guest.py's); and of one lost
after its agent answered, the wait for its sshd among the steps (the real one is
tests/integration/test_experiment.py's guest destroyed there)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import libvirt
import pytest

from vmharness.errors import HarnessError
from vmharness.guest import agent, ssh, stopped, vm
from vmharness.system import proc
from vmharness.system.machine import Machine


@pytest.fixture(autouse=True)
def _short_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake domain's state changes within its few looks: the 2 s libvirt is given would be waited out
    by every running guest's error."""
    monkeypatch.setattr(stopped, "SETTLE", 0.5)


class _Dom:
    def __init__(self, state: tuple[int, int] | None) -> None:
        self._state = state

    def isActive(self) -> bool:  # libvirt's name: true of a paused domain too
        return self._state is not None and self._state[0] != libvirt.VIR_DOMAIN_SHUTOFF

    def name(self) -> str:
        return "vmh-test-no-such-domain"

    def state(self) -> tuple[int, int]:
        if self._state is None:
            raise libvirt.libvirtError("Domain not found: no domain with matching uuid")
        return self._state


@pytest.mark.parametrize(("reason", "said"), [
    (libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN, "by the guest's power-off or reset"),
    (libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED, "destroyed, on the guest's reset or from outside"),
    (libvirt.VIR_DOMAIN_SHUTOFF_CRASHED, "its QEMU ended unexpectedly"),
    (libvirt.VIR_DOMAIN_SHUTOFF_FAILED, "failed to start"),
    (99, "shut off, reason 99"),
])
def test_libvirts_reason_for_a_stopped_guest_is_said(reason: int, said: str) -> None:
    assert said in stopped._why_stopped(_Dom((libvirt.VIR_DOMAIN_SHUTOFF, reason)))


def test_a_domain_libvirt_no_longer_knows_is_said_as_such() -> None:
    assert stopped._why_stopped(_Dom(None)).startswith("libvirt did not say why: ")
    assert stopped._why_stopped(_Dom((libvirt.VIR_DOMAIN_RUNNING, 1))) == "libvirt: state 1, reason 1"


def test_a_guest_that_stops_after_its_agent_answered_is_said_with_why_and_its_console(tmp_path: Path) -> None:
    """A step after the agent answered fails because the guest has gone: the error says so, with libvirt's
    reason and the console's end, not only the agent's "domain is not running"."""
    console = tmp_path / "console.log"
    console.write_text("booting\nthe last line the guest printed\n")
    gone = _Dom((libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_CRASHED))
    with pytest.raises(HarnessError) as caught, \
            stopped.said_if_it_stops(gone, str(console), Machine(), "after its agent answered"):
        raise HarnessError("guest agent: Requested operation is not valid: domain is not running", "")
    said = caught.value.message
    assert said.startswith("the guest stopped after its agent answered (libvirt: its QEMU ended unexpectedly")
    assert "the last line the guest printed" in said and "domain is not running" not in said


def test_an_error_of_a_guest_still_running_is_left_as_it_is(tmp_path: Path) -> None:
    up = _Dom((libvirt.VIR_DOMAIN_RUNNING, 1))
    with pytest.raises(HarnessError, match=r"^the guest has no interface"), \
            stopped.said_if_it_stops(up, str(tmp_path / "console.log"), Machine(), "after its agent answered"):
        raise HarnessError("the guest has no interface with MAC 52:54:00:00:00:01", "")


def test_an_agent_that_stops_answering_while_its_guest_runs_is_said_with_the_console(tmp_path: Path) -> None:
    """libvirt's "Guest agent is not responding" while the domain still runs (a guest that reset, an agent
    that ended) comes with the console's end; any other failure of a running guest is left as it was."""
    console = tmp_path / "console.log"
    console.write_text("booting\nreboot: Restarting system\n")
    up, when = _Dom((libvirt.VIR_DOMAIN_RUNNING, 1)), "after its agent answered"
    with pytest.raises(HarnessError) as caught, stopped.said_if_it_stops(up, str(console), Machine(), when):
        raise HarnessError("guest agent: Guest agent is not responding: Guest agent not available for now", "")
    said = caught.value.message
    assert said.startswith("the guest agent stopped answering after its agent answered, the guest still running "
                           "(guest agent: Guest agent is not responding")
    assert "reboot: Restarting system" in said
    other = HarnessError("in the guest, authorizing the harness's key: exit 1", "")
    with pytest.raises(HarnessError) as kept, stopped.said_if_it_stops(up, str(console), Machine(), when):
        raise other
    assert kept.value is other


class _Unreachable(Machine):
    """A guest whose sshd never lets the harness in (its tap went with it): each try fails at once."""

    tries = 0

    def run(self, argv: Sequence[str | Path], *, timeout: float, check: bool = True,
            input: str | None = None) -> proc.Result:
        type(self).tries += 1
        said = "ssh: connect to host 198.18.1.2 port 22: No route to host"
        return proc.Result(tuple(str(a) for a in argv), 255, "", said)


def test_a_guest_that_stops_while_ssh_is_awaited_is_said_at_once_and_as_lost(tmp_path: Path) -> None:
    """The wait for sshd asks whether the guest still runs: one destroyed there ends the wait at its next
    try, and said_if_it_stops says it was lost (it waited the whole boot timeout before, then failed as
    ssh's timeout, which the run did not boot again)."""
    console = tmp_path / "console.log"
    console.write_text("booting\nthe guest's last line\n")
    gone = _Dom((libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED))
    alive = iter([True, True, False])
    _Unreachable.tries = 0
    started = time.monotonic()
    with pytest.raises(stopped.GuestLost) as caught, \
            stopped.said_if_it_stops(gone, str(console), Machine(), "after its agent answered"):
        ssh.wait(_Unreachable("root@198.18.1.2"), timeout=300, still=lambda: next(alive))
    assert time.monotonic() - started < 5 and _Unreachable.tries == 2
    assert caught.value.message.startswith("the guest stopped after its agent answered (libvirt: destroyed")
    assert "the guest's last line" in caught.value.message


def test_the_wait_for_ssh_of_a_running_guest_still_ends_at_its_timeout() -> None:
    with pytest.raises(HarnessError, match=r"did not work within 0\.6 s: .*No route to host"):
        ssh.wait(_Unreachable("root@198.18.1.2"), timeout=0.6, still=lambda: True)


class _Stopping(_Dom):
    """A guest libvirt still calls active ("being shut down") for its first few looks, then destroyed."""

    def __init__(self, looks: int) -> None:
        super().__init__((libvirt.VIR_DOMAIN_SHUTDOWN, 0))
        self.looks = looks

    def isActive(self) -> bool:  # libvirt's name
        self.looks -= 1
        if self.looks < 0:
            self._state = (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED)
        return self.looks >= 0


def test_an_agent_error_that_comes_before_libvirt_says_the_guest_stopped_is_said_as_a_stop(tmp_path: Path) -> None:
    """The agent's "disappeared while executing command" came while libvirt still had the destroyed guest
    "being shut down" (active): read at once it said the guest still ran; libvirt is given a moment."""
    console = tmp_path / "console.log"
    console.write_text("booting\n")
    with pytest.raises(stopped.GuestLost) as caught, \
            stopped.said_if_it_stops(_Stopping(3), str(console), Machine(), "after its agent answered"):
        raise HarnessError("guest agent: Guest agent is not responding: Guest agent disappeared while executing "
                           "command", "")
    assert caught.value.message.startswith("the guest stopped after its agent answered (libvirt: destroyed")


@pytest.mark.parametrize(("state", "said"), [
    ((libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_UNKNOWN), "a KVM internal error or emulation failure"),
    ((libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_IOERROR), "paused on a disk's I/O error"),
    ((libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_CRASHED), "paused on the guest's panic"),
    ((libvirt.VIR_DOMAIN_PAUSED, 99), "paused, reason 99"),
    ((libvirt.VIR_DOMAIN_SHUTDOWN, 0), "being shut down, its QEMU not yet ended"),
    ((libvirt.VIR_DOMAIN_CRASHED, 0), "crashed, reason 0"),
    ((libvirt.VIR_DOMAIN_PMSUSPENDED, 0), "suspended by the guest's power management"),
])
def test_an_active_domain_whose_guest_runs_no_more_is_said_halted(state: tuple[int, int], said: str) -> None:
    why = stopped.halted(_Dom(state))
    assert why is not None and said in why


@pytest.mark.parametrize("state", [
    (libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_RUNNING_BOOTED),
    (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_STARTING_UP),  # libvirt's own step at a start
    (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED),  # stopped, not halted
    None,  # libvirt no longer knows it
])
def test_a_running_starting_or_stopped_domain_is_not_halted(state: tuple[int, int] | None) -> None:
    assert stopped.halted(_Dom(state)) is None


def _qemu_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A QEMU log as QEMU leaves it after a KVM internal error: its words, then the register dump."""
    monkeypatch.setattr(stopped, "QEMU_LOGS", str(tmp_path))
    dump = [f"R{i:02d}=000000000000{i:04x}" for i in range(24)]
    (tmp_path / "vmh-test-no-such-domain.log").write_text(
        "/usr/bin/qemu-system-x86_64 \\\n-name guest=vmh-test \\\n-msg timestamp=on\n"
        "KVM internal error. Suberror: 1\nemulation failure\n" + "\n".join(dump) + "\nCode=0f 0b <0f> 01\n")


def test_a_paused_guest_after_its_agent_answered_is_said_halted_with_its_qemus_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's "domain is not running" while libvirt calls the domain active: its QEMU paused it. Said
    as halted and lost, with libvirt's reason and QEMU's own line above its register dump; the same error
    from a running guest is said as the agent's (the control: only the domain's state differs)."""
    _qemu_log(tmp_path, monkeypatch)
    console = tmp_path / "console.log"
    console.write_text("booting\nthe guest's last line\n")
    error = "guest agent: Requested operation is not valid: domain is not running"
    paused = _Dom((libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_UNKNOWN))
    with pytest.raises(stopped.GuestLost) as caught, \
            stopped.said_if_it_stops(paused, str(console), Machine(), "after its agent answered"):
        raise HarnessError(error, "")
    said = caught.value.message
    assert said.startswith("the guest halted after its agent answered (libvirt: paused for a reason it does not know")
    assert "the guest's last line" in said and "KVM internal error. Suberror: 1" in said and "Code=0f 0b" in said
    assert "-msg" not in said and error not in said
    running = _Dom((libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_RUNNING_BOOTED))
    with pytest.raises(stopped.GuestLost) as control, \
            stopped.said_if_it_stops(running, str(console), Machine(), "after its agent answered"):
        raise HarnessError(error, "")
    assert control.value.message.startswith("the guest agent stopped answering after its agent answered, the guest "
                                            "still running")
    assert "KVM internal error" not in control.value.message


def test_a_guest_halted_while_booting_is_said_at_the_next_look_not_at_the_boot_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _qemu_log(tmp_path, monkeypatch)
    monkeypatch.setattr(vm, "LOOK_S", 0.0)
    monkeypatch.setattr(agent, "ping", lambda *_, **__: False)
    paused = _Dom((libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_UNKNOWN))
    started = time.monotonic()
    with pytest.raises(HarnessError) as caught:
        vm._wait_for_agent(paused, str(tmp_path / "console.log"), Machine(), timeout=300)
    assert time.monotonic() - started < 5
    assert caught.value.message.startswith("the guest halted while booting (libvirt: paused for a reason")
    assert "KVM internal error. Suberror: 1" in caught.value.message
    with pytest.raises(HarnessError, match=r"^the guest agent did not answer within 0\.5 s"):
        vm._wait_for_agent(_Dom((libvirt.VIR_DOMAIN_RUNNING, 1)), str(tmp_path / "console.log"), Machine(),
                           timeout=0.5)


def test_a_guest_halted_while_ssh_is_awaited_ends_the_wait_and_is_said_halted(tmp_path: Path) -> None:
    """As the stopped guest above, one paused there: libvirt calls it active, and the wait asked no more
    than that, so it held the run for the whole boot timeout; a running guest's wait goes on (the control)."""
    console = tmp_path / "console.log"
    console.write_text("booting\n")
    paused = _Dom((libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_IOERROR))
    _Unreachable.tries = 0
    started = time.monotonic()
    with pytest.raises(stopped.GuestLost) as caught, \
            stopped.said_if_it_stops(paused, str(console), Machine(), "after its agent answered"):
        ssh.wait(_Unreachable("root@198.18.1.2"), timeout=300, still=lambda: stopped.runs(paused))
    assert time.monotonic() - started < 5 and _Unreachable.tries == 0
    assert caught.value.message.startswith("the guest halted after its agent answered (libvirt: paused on a disk's")
    running = _Dom((libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_RUNNING_BOOTED))
    with pytest.raises(HarnessError, match=r"did not work within 0\.6 s"):
        ssh.wait(_Unreachable("root@198.18.1.2"), timeout=0.6, still=lambda: stopped.runs(running))
