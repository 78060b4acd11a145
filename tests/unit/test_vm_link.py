"""The management link's interface in a guest whose agent answered before udev probed virtio_net: it is
awaited, and one that never comes is said with what the guest has (a fake agent; the real boot with the
link is every `vm up` of tests/integration, test_syscalls.py's among them)."""

from __future__ import annotations

import time

import pytest

from vmharness.errors import HarnessError
from vmharness.guest import agent, vm

MAC = "52:54:00:f4:6f:59"


class _Coldplug:
    """The guest's interfaces as the agent reports them, the link's appearing at the `late`-th question."""

    def __init__(self, late: int | None) -> None:
        self.asked = 0
        self._late = late

    def __call__(self, dom: object) -> dict[str, str]:
        self.asked += 1
        seen = {"00:00:00:00:00:00": "lo"}
        if self._late is not None and self.asked >= self._late:
            seen[MAC] = "enp1s0"
        return seen


def test_an_interface_that_appears_after_the_agent_answered_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    coldplug = _Coldplug(late=3)
    monkeypatch.setattr(agent, "interfaces", coldplug)
    assert vm._interface(object(), MAC, timeout=30) == "enp1s0"
    assert coldplug.asked == 3  # found at the question it first appeared in, not before and not after


def test_an_interface_that_never_appears_is_said_with_what_the_guest_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "interfaces", _Coldplug(late=None))
    started = time.monotonic()
    with pytest.raises(HarnessError) as caught:
        vm._interface(object(), MAC, timeout=1.0)
    assert 1.0 <= time.monotonic() - started < 5
    assert f"no interface with MAC {MAC} after 1 s (it has: lo (00:00:00:00:00:00))" in caught.value.message
    assert "virtio_net" in caught.value.hint


def test_the_link_gets_what_is_left_of_the_boot_timeout_and_none_past_it() -> None:
    """`vm up` gives up at about its --boot-timeout: the link's steps are cut to what the agent's wait left, and
    a boot whose time ran out while its agent answered ends there, said (a test that gave `vm up` as long
    as its own timeout killed it mid-wait, and what it waited on went unsaid)."""
    now = time.monotonic()
    assert vm._left(100.0, now + 1000) == 100.0
    assert 5.0 < vm._left(100.0, now + 10) <= 10.0
    with pytest.raises(HarnessError) as caught:
        vm._left(100.0, now - 1)
    assert "boot timeout ran out before its link was up" in caught.value.message
    assert "--boot-timeout" in caught.value.hint
