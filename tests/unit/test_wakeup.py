"""The watch that wakes the main thread for its signal handlers (vmharness/wakeup.py), with real signals:
one the kernel handed to another thread, and one sent to a run's child after a fork (a host-boot run
that leaves its terminal). Either would wait, before the watch, until the main thread's sleep ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from vmharness.signals import Interrupted, terminate_as_interrupt


def test_a_signal_another_thread_took_ends_the_main_threads_sleep_at_once() -> None:
    """The kernel hands a signal to a thread that does not block it; Python runs its handler in the main
    thread, but only at its next step: one asleep (a wait for a child, a sleep) would run it once the wait
    ended. The same befalls a signal that comes just before the main thread enters its wait (a clean clone
    stood 20 minutes on a kill -PIPE that way). The watch, told of every signal, wakes the main thread."""
    took = threading.Event()
    other = threading.Thread(target=took.wait, args=(120,), daemon=True)  # does not block SIGTERM
    began = time.monotonic()
    with pytest.raises(Interrupted) as got, terminate_as_interrupt():
        other.start()
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the kernel's choice: not main
        try:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
            time.sleep(60)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            took.set()
    assert got.value.signum == signal.SIGTERM and time.monotonic() - began < 30  # not the sleep's end


FORKED = r"""
import os, sys, time
from vmharness import signals
with signals.terminate_as_interrupt(keep=True):
    if os.fork():
        os._exit(0)
    signals.forked()  # as hostrun.detach does: the watch did not come along
    try:
        print(os.getpid(), flush=True)
        time.sleep(60)
    except signals.Interrupted as e:
        print("interrupted by", e.signum, flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGPIPE, signal.SIGTERM], ids=["SIGPIPE", "SIGTERM"])
def test_a_forked_command_gets_a_watch_of_its_own(signum: signal.Signals) -> None:
    """A fork keeps only the thread that forked: without a watch of its own, the child blocks SIGPIPE in
    its every thread, and a `kill -PIPE` stays pending for ever."""
    p = subprocess.Popen([sys.executable, "-c", FORKED], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    child = int(p.stdout.readline())
    os.kill(child, signum)
    try:
        out, err = p.communicate(timeout=30)  # the pipe ends with the forked child
    except subprocess.TimeoutExpired:
        os.kill(child, signal.SIGKILL)
        p.communicate()
        pytest.fail(f"{signum.name} did not end the forked command's sleep within 30 s")
    assert out.splitlines() == [f"interrupted by {int(signum)}"], (out, err)
