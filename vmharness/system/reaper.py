"""`python -m vmharness.system.reaper FD CMD [ARG...]`: CMD as this process's child, its PID written to
file descriptor FD (one line, then FD closed), and this process the reaper of whatever CMD leaves
orphaned (PR_SET_CHILD_SUBREAPER).

Why: libvirtd starts each guest's QEMU as a daemon, so QEMU's parent is init. libvirt powers a guest off
by SIGTERM, then waits until QEMU's PID is gone, and a process that has exited stays as a zombie until
its parent reaps it. Where init reaps late (a container's or a sandbox's init; on the machine the
project's tests run on, 1.5-1.9 s after the exit), every guest's stop waited that long for nothing.
Under this process the QEMUs libvirtd starts are reaped the moment they exit.

Not tini (`tini -s`), which does the same: the harness stops the daemons it starts by their PID, with
SIGKILL where SIGTERM was not enough, and tini's child outlives tini killed so. Here CMD dies with this
process (PR_SET_PDEATHSIG). SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to CMD;
this process exits when CMD has, with its status (128 + N for a CMD ended by signal N), whatever it
still holds then (a guest left running) going to init as before."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any, NoReturn

# Only the standard library's os, signal and ctypes: the reaper starts with every libvirtd, in the rig's
# L1 under TCG too, where each module imported costs (vmharness.system.proc's imports took 37 ms of
# its 90 here; this one starts in 20).
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
WATCHED = {*PASSED_ON, signal.SIGCHLD}
# what Python ignores at its start, which a program it execs would inherit ignored (subprocess's
# restore_signals puts the same back)
RESTORED = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name))


def status(wait_status: int) -> int:
    """The exit status a shell would report for a child's wait status."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def _exec(cmd: list[str], parent: int, prctl: Any) -> NoReturn:
    """In the child: dies with the reaper, a session of its own, the signals at their defaults and none
    held (one sent to CMD's PID meanwhile ends it once it is let through); never returns."""
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the reaper died before the line above
            os._exit(1)
        os.setsid()
        for sig in (*PASSED_ON, *RESTORED):  # SIGINT's is Python's own handler until the exec
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        os.write(2, f"error: cannot run {cmd[0]}: {exc.strerror}\n".encode(errors="replace"))
    os._exit(127)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("error: usage: python -m vmharness.system.reaper FD CMD [ARG...]", file=sys.stderr)
        return 2
    fd, cmd = int(argv[0]), argv[1:]
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    if prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        print(f"error: cannot become a subreaper: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    # Every signal it handles is held from the start and taken with sigwaitinfo: a handler could run just
    # before a wait for children, which would then not be interrupted, and the signal would wait with it
    # (1 in 300 SIGTERMs sent at once after the start was never passed on, so).
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        _exec(cmd, parent, prctl)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(f"{child}\n")
    except OSError as exc:
        print(f"error: cannot write CMD's PID to file descriptor {fd}: {exc.strerror}", file=sys.stderr)
    while True:
        signum = signal.sigwaitinfo(WATCHED).si_signo
        if signum != signal.SIGCHLD:
            os.kill(child, signum)
            continue
        while True:  # every child that has exited: CMD, or an orphan of its handed to this process
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
            if pid == child:
                return status(wait_status)
            if pid == 0:
                break


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
