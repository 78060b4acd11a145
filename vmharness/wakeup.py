"""Waking the main thread for its signal handlers. Python runs a handler in the main thread, at its next
check between two steps of Python code, not when the signal comes: a main thread inside a blocking call
(a `time.sleep`, a wait for a child) runs it only if the signal interrupts that call. One that came just
before the call (the thread was preempted after letting go of the interpreter's lock and before entering
the system call), or that the kernel handed to another thread, interrupts nothing, and the handler waits
for the call's end: an hour's sleep, a child's whole run. So one thread of the harness, the watch, is
told of every signal (Python writes its number to the wakeup fd, from whichever thread took it) and calls
the main thread (WAKE, pthread_kill) until the main thread has taken two calls made one after the other:
the second call's handler runs in a check that began after the signal came, and that check ran the
signal's handler too.

The watch also takes a SIGPIPE sent to the process: every other thread blocks it (vmharness/signals.py
says why)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

WAKE = signal.SIGRTMIN  # the watch's call to the main thread
_calls = 0  # the watch's calls to the main thread so far (the watch alone counts them)
_taken = 0  # the last of them whose handler the main thread ran


def taken() -> None:
    """The main thread's handler of WAKE, on its way: the calls made so far are taken."""
    global _taken
    _taken = _calls


class Watch:
    """The thread told of every signal (their numbers, written by Python to the wakeup fd `tell`),
    which calls the main thread until it has run their handlers. It starts with `blocked` and WAKE
    blocked, and keeps them so but SIGPIPE: a SIGTERM the kernel handed to it is told to it all the
    same."""

    def __init__(self, blocked: tuple[int, ...]) -> None:
        self.read, self.tell = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # Python's writes must never block
        os.set_blocking(self.read, True)
        self.ending: list[bool] = []
        self.thread = threading.Thread(target=self._run, args=(threading.main_thread().ident,), name="vmh-signals",
                                       daemon=True)
        before = signal.pthread_sigmask(signal.SIG_BLOCK, (*blocked, WAKE))
        try:
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    def told(self, signum: int) -> None:
        """News of a signal from the harness itself (one a garbage collector's callback swallowed)."""
        with contextlib.suppress(OSError):  # full: the watch has news to read already
            os.write(self.tell, bytes([signum]))

    def stop(self) -> None:
        self.ending.append(True)
        self.told(0)
        self.thread.join(timeout=5)
        self.close()

    def close(self) -> None:
        os.close(self.read)
        os.close(self.tell)

    def _run(self, main: int | None) -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPIPE})
        while True:
            news = os.read(self.read, 512)
            if self.ending or main is None:
                return
            if any(n != WAKE for n in news):  # WAKE's own news is the watch's call coming back
                _call(main, self.ending)


def _call(main: int, ending: list[bool]) -> None:
    """WAKE to the main thread until it has taken two calls made one after the other: a check that
    began before the signal came may have passed its handler by, the one after the first call's cannot."""
    global _calls
    for _ in range(2):
        _calls += 1
        mine, wait = _calls, 0.001
        while _taken < mine and not ending:
            signal.pthread_kill(main, WAKE)
            time.sleep(wait)  # the main thread busy with Python code takes it at its next step
            wait = min(2 * wait, 0.5)
