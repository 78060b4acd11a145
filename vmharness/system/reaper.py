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

from vmharness.errors import HarnessError
from vmharness.system import proc

PR_SET_CHILD_SUBREAPER = 36
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def status(wait_status: int) -> int:
    """The exit status a shell would report for a child's wait status."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("error: usage: python -m vmharness.system.reaper FD CMD [ARG...]", file=sys.stderr)
        return 2
    fd, cmd = int(argv[0]), argv[1:]
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        print(f"error: cannot become a subreaper: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    started: list[int] = []  # CMD's PID, once it is known
    early: list[int] = []  # a signal that came before: passed on once it is

    def pass_on(signum: int, _frame: object) -> None:
        if started:
            os.kill(started[0], signum)
        else:
            early.append(signum)
    for sig in PASSED_ON:  # CMD starts with them at their defaults (exec resets a handled signal)
        signal.signal(sig, pass_on)
    try:
        child = proc.spawn(cmd, stdout=None, stderr=None, die_with_parent=True)
    except HarnessError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 127
    started.append(child.pid)
    for signum in early:
        os.kill(child.pid, signum)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(f"{child.pid}\n")
    except OSError as exc:
        print(f"error: cannot write CMD's PID to file descriptor {fd}: {exc.strerror}", file=sys.stderr)
    while True:
        pid, wait_status = os.wait()  # any child: CMD, or an orphan of its handed to this process
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(wait_status)  # reaped here, not by Popen
            return status(wait_status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
