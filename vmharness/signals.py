"""Signals. Every signal whose default action ends the process (SIGNALS) is turned into Interrupted, a
KeyboardInterrupt, so that the rollback a Ctrl-C runs also runs for it: a SIGQUIT or a SIGUSR1 must not
leave an nginx listening or a journal record live. The first one decides how the command ends (exit 128
+ its number). Any that comes after it, while the harness gives back what it took, is noted and nothing
more: raised, it would cut the giving back short and change the exit status. While a shield is up (a
journal record and the state that goes with it, a clean-up), a signal is held until the shield ends,
then raised (if it is the first).

Python swallows an exception raised where nothing can take it: a weakref callback or a `__del__` run by
the garbage collector (logging's `_removeHandlerRef` is one), which prints "Exception ignored" and goes
on as if no signal had come. The command's `sys.unraisablehook` takes such an Interrupted, forgets it was
raised and sends the signal to the main thread again, so that it is raised where the code can unwind.

A handler runs in the main thread at its next step of Python code, not when the signal comes: a watch
thread, told of every signal, wakes a main thread that waits in a system call (vmharness/wakeup.py).

SIGPIPE is two things. A write to a pipe whose reader went away (`vmharness report ... | head`, or a
child that exited before reading its input) sends it to the writing thread; Python ignores it there, so
that the write fails with EPIPE instead (BrokenPipeError: a quiet exit 141 for stdout, a failed child
for the others). A `kill -PIPE` sends it to the process, to end it. Both are kept apart by the threads'
signal masks: every thread of the harness blocks SIGPIPE but the watch (a writer's is then left pending
on it, and its write fails with EPIPE, as before), so the kernel hands a SIGPIPE sent to the process to
the watch, and the main thread runs its handler. Children start with SIGPIPE unblocked (`for_child`), as
a shell would start them."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from vmharness import wakeup

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
           signal.SIGPIPE, signal.SIGALRM)
PIPE = {signal.SIGPIPE}


class Interrupted(KeyboardInterrupt):
    """A signal that ends the command; `signum` tells which (exit 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


_held: list[int] = []
_holding = False  # from a shield's first handler swap to its last
_state = "off"  # "armed": a command runs and the first signal is raised; "ended": the command is over,
# a signal is only noted; "off": outside terminate_as_interrupt (a shield raises what it held)
_first: int | None = None  # the signal that ended the command


def first() -> int | None:
    """The signal that ended the command (or came once it had ended), if one did."""
    return _first


def note(signum: int) -> None:
    """A signal that ends the command, had another way than the handler (a plain KeyboardInterrupt)."""
    global _first
    if _first is None:
        _first = signum


def disarm() -> None:
    """The command is over: from now on a signal is noted (it sets the exit status), never raised."""
    global _state
    if _state == "armed":
        _state = "ended"


def status(code: int) -> int:
    """How the program ends: 128 + the first signal's number if one came (whatever came after it), said
    on stderr; else the command's own code."""
    signum = _first
    if signum is None:
        return code
    if signum == signal.SIGPIPE:  # the reader went away, or a kill -PIPE: quietly, as a shell's pipe ends
        quiet_stdout()
    else:
        with contextlib.suppress(OSError):
            print(f"error: interrupted by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    return 128 + signum


def quiet_stdout() -> None:
    """stdout onto /dev/null: what is left in its buffer must not fail again at exit."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _handler(signum: int, frame: FrameType | None) -> None:
    if _holding:  # a shield is swapping its handlers in or out: held with the others
        _held.append(signum)
        return
    if _first is not None or _state != "armed":  # giving back after the first, or the command is over
        note(signum)
        return
    note(signum)
    raise Interrupted(signum)


@contextmanager
def terminate_as_interrupt(keep: bool = False) -> Iterator[None]:
    """Every signal of SIGNALS unwinds the command in the block as Interrupted. `keep` (the program
    itself, which exits right after): the handlers stay, so that a signal that comes as it exits is
    noted, not acted on; otherwise they are given back."""
    global _first, _state
    if not _main_thread():
        yield
        return
    _first, _state = None, "armed"
    _again.clear()
    old = {s: signal.signal(s, _handler) for s in SIGNALS}
    old_wake = signal.signal(WAKE, _woken)
    _hooks[:] = [sys.unraisablehook]
    sys.unraisablehook = _unraisable
    before = signal.pthread_sigmask(signal.SIG_BLOCK, PIPE)
    old_fd = _start_watch()
    try:
        yield
    finally:
        disarm()
        if not keep:
            _watching.pop().stop()
            signal.set_wakeup_fd(old_fd)
            signal.signal(signal.SIGPIPE, old.pop(signal.SIGPIPE))  # ignored again: one pending is dropped
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            for s, h in old.items():
                signal.signal(s, h)
            signal.signal(WAKE, old_wake)
            sys.unraisablehook = _hooks.pop()
            _state = "off"


_hooks: list[Callable[[sys.UnraisableHookArgs], object]] = []  # the unraisable hook in place before the command's


def _unraisable(u: sys.UnraisableHookArgs) -> None:
    """An Interrupted that Python could not raise (a garbage collector's callback took it): as if its
    signal had not come yet, sent again to the main thread; anything else as Python reports it."""
    global _first, _hooked
    got = u.exc_value
    if not isinstance(got, Interrupted) or _state != "armed":
        (_hooks[0] if _hooks else sys.__unraisablehook__)(u)
        return
    _hooked = True  # raised in here, Interrupted would be swallowed for good: the watch's calls wait
    try:
        if _first == got.signum:
            _first = None
        _again.append(got.signum)
        if _watching:
            _watching[0].told(got.signum)
    finally:
        _hooked = False


WAKE = wakeup.WAKE  # the watch's call to the main thread: run the handlers of the signals that came (and
# raise one a garbage collector's callback swallowed: _again)
_again: list[int] = []
_hooked = False  # the main thread is in _unraisable
_watching: list[wakeup.Watch] = []  # while a command runs


def forked() -> None:
    """In the child of a fork while a command runs (a run that leaves its terminal): a fork keeps only
    the thread that forked, so the child gets a watch of its own, told on a pipe of its own."""
    if not _watching:
        return
    _watching.pop().close()
    _start_watch()


def _start_watch() -> int:
    """A watch, told of every signal on its pipe (Python's wakeup fd); the wakeup fd it replaced."""
    _watching[:] = [wakeup.Watch(SIGNALS)]
    return signal.set_wakeup_fd(_watching[0].tell, warn_on_full_buffer=False)


def _woken(signum: int, frame: FrameType | None) -> None:
    if _hooked:  # not taken: the watch calls again
        return
    wakeup.taken()
    if _again:
        _handler(_again.pop(), frame)


@contextmanager
def for_child() -> Iterator[None]:
    """Around the start of a child process: SIGPIPE unblocked in this thread, so that the child inherits
    it unblocked (it dies of a write to a closed pipe, as `producer | head` expects). A SIGPIPE left
    pending here by a write that failed with EPIPE is dropped first: delivered now, it would end the
    command for a pipe that merely closed."""
    if signal.SIGPIPE not in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        yield
        return
    while signal.sigtimedwait(PIPE, 0) is not None:
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PIPE)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, PIPE)


@contextmanager
def shielded() -> Iterator[None]:
    """Hold every signal of SIGNALS while the block runs (a clean-up); the first one held is raised as
    Interrupted when it ends, unless the command is already ending by an earlier one (then the
    clean-up after this block must run too). Nested shields hold until the outermost ends."""
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
    if not _held:
        return
    ending = _state == "ended" or (_state == "armed" and _first is not None)  # by an earlier signal, or over
    note(_held[0])
    if not ending:
        raise Interrupted(_held[0])


@contextmanager
def _blocked(these: tuple[int, ...] = SIGNALS) -> Iterator[None]:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, these)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _hold(signum: int, frame: FrameType | None) -> None:
    _held.append(signum)
