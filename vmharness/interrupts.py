"""Signals. SIGTERM and SIGHUP are turned into KeyboardInterrupt, so that the rollback a Ctrl-C runs
also runs for them; and while the harness gives things back, a further signal is held until the
giving back is done (a second Ctrl-C must not leave half a clean-up), then raised."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A signal that ends the command; `signum` tells which (exit 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    if not _main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if _holding:  # a shield is swapping its handlers in or out: held with the others
            _held.append(signum)
            return
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def shielded() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while the block runs (a clean-up); the first one held is
    raised as Interrupted when it ends. Nested shields hold until the outermost ends."""
    if not _main_thread() or signal.getsignal(signal.SIGINT) is _hold:
        yield
        return
    # The handlers are swapped with the signals blocked: one arriving midway would otherwise find some
    # handlers swapped and not others (and be lost, or leave a handler holding for ever); it waits,
    # and is held once they are unblocked. The mask is this thread's alone: with other threads alive
    # (a sampler's reader, say) the kernel hands the signal to one of them, and Python runs its
    # handler here at once, mid-swap. So the handlers also hold while `_holding` is set.
    global _holding
    _held.clear()
    _holding = True
    try:
        with _blocked():
            old = {s: signal.signal(s, _hold) for s in SIGNALS}
        try:
            yield
        finally:
            with _blocked():
                for s, h in old.items():
                    signal.signal(s, h)
    finally:
        _holding = False
    if _held:
        raise Interrupted(_held[0])


_held: list[int] = []
_holding = False  # from a shield's first handler swap to its last


@contextmanager
def _blocked() -> Iterator[None]:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _hold(signum: int, frame: FrameType | None) -> None:
    _held.append(signum)
