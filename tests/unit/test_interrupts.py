"""Signals around a shield, with real signals sent to this process: one that arrives while the shield
swaps its handlers is held and raised when the shield ends, never lost (a SIGTERM that came just as
`bench` started a client's capacity server was once dropped that way, and the sweep ran on). Then the
whole program in a child process, sent each signal whose default action ends a process: it gives back
what it took and exits 128 + that signal's number, whatever comes while it gives back (SIGQUIT and
SIGUSR1 once ended `bench` at once, its nginx left listening); and SIGPIPE's two faces, a reader of
our output gone (quiet, 141) and a child's pipe closed (nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vmharness import signals
from vmharness.signals import Interrupted, shielded, terminate_as_interrupt


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
    assert signal.getsignal(signal.SIGINT) is not signals._hold  # every handler given back


@pytest.mark.parametrize("call", [4, 5, 6], ids=["after SIGINT's", "after SIGTERM's", "after SIGHUP's"])
def test_a_signal_while_the_shield_ends_is_raised_and_no_handler_is_left_holding(
        monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    with terminate_as_interrupt():
        _signal_midway(monkeypatch, lambda n: n == call)
        with pytest.raises(Interrupted) as got, shielded():
            pass
        monkeypatch.undo()
        assert got.value.signum == signal.SIGTERM
        assert all(signal.getsignal(s) is not signals._hold for s in signals.SIGNALS)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) & set(signals.SIGNALS) == set()  # nothing left blocked


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
            assert all(signal.getsignal(s) is not signals._hold for s in signals.SIGNALS)
        assert ran == ["the block"] and got.value.signum == signal.SIGTERM
    finally:
        stop.set()
        other.join()


# --- the whole program, for real: every signal that would end it, sent to a child running cli.main ---------
# The child's command (standing in for `bench`) takes something (a file), then waits; on the signal its
# `finally` gives it back, in a shield and then without one, as the harness's clean-ups do. Told to
# ("wait"), each part of the giving back waits for a line on stdin, which the test writes only once it
# has sent that part its signal: the signal comes in that part however slow a loaded machine is.
CHILD = r"""
import faulthandler, os, sys, time
faulthandler.enable(all_threads=True)  # SIGABRT from a test that waited too long: every thread's stack
from pathlib import Path
from vmharness.cli import main as cli
from vmharness.cli import report as cli_report
from vmharness import signals
from vmharness.system import proc

marks, wait = Path(sys.argv[1]), sys.argv[2] == "wait"

def command(args):
    (marks / "taken").write_text("")
    try:
        print("ready", flush=True)
        time.sleep(3600)  # a signal that only ends the sleep's wait would show (the test waits 120 s)
    finally:
        with signals.shielded():
            print("giving back", flush=True)
            if wait:
                sys.stdin.readline()
            (marks / "taken").unlink()
        print("giving back, unshielded", flush=True)
        if wait:
            sys.stdin.readline()
        (marks / "given back").write_text("")
    return 0

cli_report.cmd_report = command
sys.argv = ["vmharness", "report", "x"]
sys.exit(cli.main())
"""


def _child(tmp_path: Path, wait: bool = False, script: str = CHILD) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, str(tmp_path), "wait" if wait else "no"],
                            stdin=subprocess.PIPE if wait else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _go_on(p: subprocess.Popen[str]) -> None:
    """The line the child waits for in its giving back."""
    assert p.stdin is not None
    p.stdin.write("\n")
    p.stdin.flush()


WAIT = 120.0  # seconds for a line from the child, where a quiet machine takes a tenth of one


def _wait_for(p: subprocess.Popen[str], line: str) -> None:
    """Until the child says `line`; past WAIT it is sent SIGABRT, and its threads' stacks (faulthandler)
    are the failure's: a clean clone on 2026-12-03 had the child asleep in the command for 20 minutes after
    a kill -PIPE, SIGPIPE no longer pending and not acted on (the main thread's sleep began just after the
    signal came; now the watch wakes it)."""
    assert p.stdout is not None
    late = threading.Timer(WAIT, p.send_signal, (signal.SIGABRT,))
    late.start()
    try:
        for got in p.stdout:
            if got.strip() == line:
                return
    finally:
        late.cancel()
    pytest.fail(f"{line!r} never came within {WAIT:g} s: {p.communicate()[1]}")


def _ended(p: subprocess.Popen[str], tmp_path: Path, signum: int) -> None:
    """Exit 128 + signum, everything given back, one line saying why (none for SIGPIPE)."""
    began = time.monotonic()
    try:
        _, err = p.communicate(timeout=120)  # seconds, where a quiet machine takes a tenth of one
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"{signal.Signals(signum).name} did not end the command within 120 s: {err!r}")
    assert p.returncode == 128 + signum, (p.returncode, f"{time.monotonic() - began:.1f} s", err)
    assert not (tmp_path / "taken").exists() and (tmp_path / "given back").exists()
    said = [] if signum == signal.SIGPIPE else [f"error: interrupted by {signal.Signals(signum).name}"]
    assert err.splitlines() == said, err


ENDING = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE,
          signal.SIGALRM)  # every signal whose default action ends the process (signal(7): Term or Core)


@pytest.mark.parametrize("signum", ENDING, ids=[s.name for s in ENDING])
def test_every_ending_signal_unwinds_and_gives_back(tmp_path: Path, signum: signal.Signals) -> None:
    p = _child(tmp_path)
    _wait_for(p, "ready")
    p.send_signal(signum)
    _ended(p, tmp_path, signum)


@pytest.mark.parametrize(("first", "then"), [(signal.SIGTERM, signal.SIGINT), (signal.SIGQUIT, signal.SIGTERM),
                                             (signal.SIGUSR1, signal.SIGHUP), (signal.SIGPIPE, signal.SIGUSR2)],
                         ids=lambda s: s.name)
def test_a_signal_during_the_giving_back_changes_neither_it_nor_the_status(
        tmp_path: Path, first: signal.Signals, then: signal.Signals) -> None:
    """A second signal in the shielded part of the giving back, a third (SIGALRM) in the part after it."""
    p = _child(tmp_path, wait=True)
    _wait_for(p, "ready")
    p.send_signal(first)
    _wait_for(p, "giving back")
    p.send_signal(then)
    _go_on(p)
    _wait_for(p, "giving back, unshielded")
    p.send_signal(signal.SIGALRM)
    _go_on(p)
    _ended(p, tmp_path, first)


PIPES = r"""
import subprocess, sys
from vmharness.cli import main as cli
from vmharness.cli import report as cli_report
from vmharness.system import proc

def command(args):
    # a child that exits without reading its input: the write fails (EPIPE), the command goes on
    assert proc.run(["true"], input="x" * (1 << 20), timeout=30).ok
    # a child starts with SIGPIPE unblocked (it dies of a write to a closed pipe, as `yes | head` expects)
    blocked = int(proc.run(["sh", "-c", "grep SigBlk /proc/self/status"], timeout=30).stdout.split()[1], 16)
    print("child blocks SIGPIPE" if blocked & (1 << 12) else "child does not block SIGPIPE", flush=True)
    yes = proc.run(["sh", "-c", "yes | head -1"], timeout=30)  # a blocked SIGPIPE: yes says "Broken pipe"
    print(f"{yes.stdout.strip()} {yes.stderr.strip() or 'quietly'}", flush=True)
    for n in range(200000):  # then the reader of our own output goes away (`| head -3`)
        print(f"line {n}")
    return 0

cli_report.cmd_report = command
sys.argv = ["vmharness", "report", "x"]
sys.exit(cli.main())
"""


def test_a_closed_pipe_is_a_quiet_141_and_a_childs_closed_pipe_nothing(tmp_path: Path) -> None:
    p = _child(tmp_path, script=PIPES)
    assert p.stdout is not None
    head = [p.stdout.readline().strip() for _ in range(3)]
    p.stdout.close()
    err = p.stderr.read() if p.stderr else ""
    p.wait(timeout=60)
    assert head == ["child does not block SIGPIPE", "y quietly", "line 0"], (head, err)
    assert (p.returncode, err) == (141, ""), err


def test_a_signal_inside_a_garbage_collectors_callback_is_raised_after_it(capfd: pytest.CaptureFixture[str]) -> None:
    """Python swallows an exception raised in a weakref callback (logging's handler references are
    such): a SIGTERM that came there once was lost, and `run` measured on to its end."""
    class Handler:
        pass

    ran = []
    with pytest.raises(Interrupted) as got, terminate_as_interrupt():
        h = Handler()

        def collected(r: object) -> None:
            ran.append("the callback")
            os.kill(os.getpid(), signal.SIGTERM)

        ref = weakref.ref(h, collected)
        del h  # the callback runs now, and the handler raises inside it
        ran.append("after it")
        end = time.monotonic() + 60  # the watch thread sends it again: however late a loaded machine runs it
        while time.monotonic() < end:
            time.sleep(0.001)
        ran.append("never")
    assert ref() is None and ran == ["the callback", "after it"] and got.value.signum == signal.SIGTERM
    assert signals.first() == signal.SIGTERM and "Exception ignored" not in capfd.readouterr().err


def test_the_command_line_starts_no_thread_before_sigpipe_is_blocked() -> None:
    """A thread that exists before the command blocks SIGPIPE (numpy's OpenBLAS starts its pool on import)
    does not block it, and a `kill -PIPE` the kernel hands to that thread is lost: the command goes on. The
    command line's own modules import none of the libraries that start threads; a command imports them as
    it runs, and their threads then inherit the mask."""
    script = ("import sys, threading\nfrom vmharness.cli import main\n"
              "print(sorted(m for m in ('numpy', 'scipy', 'matplotlib', 'libvirt') if m in sys.modules))\n"
              "import os\nprint(len(os.listdir('/proc/self/task')))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "1"], out.stdout + out.stderr


def test_the_sigpipe_watch_takes_no_other_signal() -> None:
    """The watch thread waits for SIGPIPE alone. A SIGTERM the kernel handed to it (as it does when the
    main thread has one pending, or blocks it in a shield) would run its handler only once the main
    thread woke: after its `time.sleep`, or its whole wait for a child."""
    import threading

    with terminate_as_interrupt():
        watch = next(t for t in threading.enumerate() if t.name == "vmh-signals")
        status = Path(f"/proc/self/task/{watch.native_id}/status").read_text()
    blocked = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")), 16)
    expected = {*signals.SIGNALS, signals.WAKE} - signals.PIPE  # SIGPIPE: unblocked while it waits for one
    assert {s for s in expected if blocked & (1 << (s - 1))} == expected, hex(blocked)


def test_a_child_that_never_says_the_line_fails_with_its_stacks(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """_wait_for's own bound: a stall is a failure after WAIT, with the child's threads' stacks, not a hang."""
    monkeypatch.setattr(sys.modules[__name__], "WAIT", 3.0)
    p = _child(tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)never came within 3 s.*wakeup.py.*in _run.*in command"):
        _wait_for(p, "a line never said")
