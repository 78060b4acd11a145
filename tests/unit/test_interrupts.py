"""Signals around a shield, with real signals sent to this process: one that arrives while the shield
swaps its handlers is held and raised when the shield ends, never lost (a SIGTERM that came just as
`bench` started a client's capacity server was once dropped that way, and the sweep ran on)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from vmharness import interrupts
from vmharness.interrupts import Interrupted, shielded, terminate_as_interrupt


def _signal_midway(monkeypatch: pytest.MonkeyPatch, when: Callable[[int], bool], settle: float = 0.0) -> None:
    """signal.signal that sends this process a SIGTERM on the call where `when(call number)` holds
    (and then waits `settle` seconds, time for another thread to take it)."""
    real = signal.signal
    calls = [0]

    def swapping(signum: Any, handler: Any) -> Any:
        calls[0] += 1
        old = real(signum, handler)
        if when(calls[0]):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(settle)
        return old

    monkeypatch.setattr(signal, "signal", swapping)


@pytest.mark.parametrize("call", [1, 2, 3], ids=["after SIGINT's", "after SIGTERM's", "after SIGHUP's"])
def test_a_signal_while_the_shield_sets_up_is_held_then_raised(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    ran = []
    with terminate_as_interrupt():
        _signal_midway(monkeypatch, lambda n: n == call)
        with pytest.raises(Interrupted) as got, shielded():
            ran.append("the block")
        monkeypatch.undo()
    assert ran == ["the block"] and got.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is not interrupts._hold  # every handler given back


@pytest.mark.parametrize("call", [4, 5, 6], ids=["after SIGINT's", "after SIGTERM's", "after SIGHUP's"])
def test_a_signal_while_the_shield_ends_is_raised_and_no_handler_is_left_holding(
        monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    with terminate_as_interrupt():
        _signal_midway(monkeypatch, lambda n: n == call)
        with pytest.raises(Interrupted) as got, shielded():
            pass
        monkeypatch.undo()
        assert got.value.signum == signal.SIGTERM
        assert all(signal.getsignal(s) is not interrupts._hold for s in interrupts.SIGNALS)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) & set(interrupts.SIGNALS) == set()  # nothing left blocked


def test_a_signal_inside_the_shield_waits_for_its_end() -> None:
    done = []
    with terminate_as_interrupt(), pytest.raises(Interrupted), shielded():
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("after the signal")
    assert done == ["after the signal"]


@pytest.mark.parametrize("call", [1, 2, 3, 4, 5, 6])
def test_a_signal_mid_swap_is_held_while_another_thread_lives(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """The shield blocks the signals in its own thread; the kernel then gives one to another thread
    (a sampler's reader, say), and Python runs its handler in the main thread mid-swap all the same."""
    import threading

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        ran = []
        with terminate_as_interrupt():
            _signal_midway(monkeypatch, lambda n: n == call, settle=0.05)
            with pytest.raises(Interrupted) as got, shielded():
                ran.append("the block")
            monkeypatch.undo()
            assert all(signal.getsignal(s) is not interrupts._hold for s in interrupts.SIGNALS)
        assert ran == ["the block"] and got.value.signum == signal.SIGTERM
    finally:
        stop.set()
        other.join()
