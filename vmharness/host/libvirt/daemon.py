"""libvirtd on a machine without systemd (CI, containers): started in the foreground when none
answers, stopped by PID at the end. `python -m vmharness.host.libvirt.daemon CMD...` runs CMD with it up.

libvirtd lists the hugetlbfs mounts when it starts, so one that CMD mounts (a run's 1 GiB pages) is
not seen by it. A daemon started here runs no one else's guests, so CMD may have it restarted: the
wrapper tells CMD (only CMD, not its children) in VMHARNESS_LIBVIRTD which daemon it started and the
two pipe ends to ask on, and restarts it when asked, provided it runs no guest then
(`restart_owned`; libvirt/hugetlbfs.py decides when).

/dev/kvm gets the group and mode Debian's udev rule gives it (root:kvm 0660) while it runs: without
it libvirt's QEMU user cannot open it, libvirt decides its cached QEMU capabilities are stale, and
re-probes QEMU (about 45 s) on every call."""

from __future__ import annotations

import grp
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vmharness import environ, signals
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.host.inspect import probes
from vmharness.system import proc

LOG_DIR = Path("/var/log/libvirt")
VIRTLOGD_SOCKET = "/run/libvirt/virtlogd-sock"
ENV = "VMHARNESS_LIBVIRTD"  # "PID:FD:INODE:FD:INODE" in CMD's environment: the daemon, the pipes to ask on
RESTART_TIMEOUT = 120.0  # seconds for a restart: stopping (15 s grace) and starting again under TCG
_restarted: int | None = None  # the daemon's PID after this process had it restarted


@contextmanager
def _kvm_as_udev_leaves_it() -> Iterator[None]:
    path = "/dev/kvm"
    if not os.path.exists(path):
        yield
        return
    before = os.stat(path)
    kvm_gid = grp.getgrnam("kvm").gr_gid
    os.chown(path, -1, kvm_gid)
    os.chmod(path, 0o660)
    try:
        yield
    finally:
        os.chown(path, -1, before.st_gid)
        os.chmod(path, before.st_mode & 0o7777)


@dataclass
class Started:
    """A daemon started here, under its reaper (vmharness.system.reaper: the guests' QEMUs libvirtd leaves
    orphaned are reaped the moment they exit, not when a slow init gets to them, which every guest's stop
    waited for). The reaper is what is stopped, by its PID; the daemon dies with it."""

    name: str
    reaper: subprocess.Popen[bytes]
    pid: int  # the daemon's own

    def poll(self) -> int | None:
        return self.reaper.poll()


PID_TIMEOUT = 30.0  # seconds for the reaper to say its daemon's PID (a Python start, then a fork)


def _spawn(daemon: str) -> Started:
    read_end, write_end = os.pipe()
    try:
        with (LOG_DIR / f"{daemon}-vmharness.log").open("ab") as log:
            reaper = proc.spawn([sys.executable, "-m", "vmharness.system.reaper", str(write_end), daemon],
                                stderr=log.fileno(), stdout=log.fileno(), pass_fds=(write_end,))
        os.close(write_end)
        write_end = -1
        ready, _, _ = select.select([read_end], [], [], PID_TIMEOUT)
        line = os.read(read_end, 64).decode(errors="replace").strip() if ready else ""
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    if not is_digits(line):
        proc.stop(reaper, grace=15)
        raise HarnessError(f"{daemon} did not start; see {LOG_DIR}/{daemon}-vmharness.log",
                           "is libvirt-daemon-system installed?")
    return Started(daemon, reaper, int(line))


def _wait_reachable(started: list[Started], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probes.libvirtd()["reachable"]:
        if time.monotonic() > deadline or any(p.poll() is not None for p in started):
            raise HarnessError(f"libvirtd did not start; see {LOG_DIR}/libvirtd-vmharness.log",
                               "is libvirt-daemon-system installed?")
        time.sleep(0.2)


@contextmanager
def running(timeout: float = 60.0) -> Iterator[list[Started]]:
    """Yields what was started ([virtlogd, libvirtd]; [libvirtd] when a virtlogd answered already; nothing
    when a libvirtd answered already). A virtlogd that serves already (one left by another tool, or
    started by hand) is used as it is: a second one cannot take its PID file and exits at once, which
    read as libvirtd failing to start (a clean clone's test_study.py failed so beside a virtlogd left over)."""
    started: list[Started] = []
    with _kvm_as_udev_leaves_it():
        try:
            if not probes.libvirtd()["reachable"]:
                LOG_DIR.mkdir(parents=True, exist_ok=True)
                Path("/run/libvirt").mkdir(parents=True, exist_ok=True)
                if not probes.answers(VIRTLOGD_SOCKET):
                    started.append(_spawn("virtlogd"))
                started.append(_spawn("libvirtd"))
                _wait_reachable(started, timeout)
            yield started
        finally:
            for p in reversed(started):
                proc.stop(p.reaper, grace=15)


def _restart(started: list[Started]) -> int:
    """Stop the libvirtd in `started` and start it again, unless it runs a guest; its new PID."""
    from vmharness.host.libvirt import api  # libvirt's bindings, only when a restart is asked for

    conn = api.connect(api.DEFAULT_URI)
    try:
        guests = conn.numOfDomains()
    finally:
        conn.close()
    if guests:
        raise HarnessError(f"the libvirtd vmharness started runs {guests} guest(s): it is not restarted under them",
                           "stop them (vmharness vm down NAME), then try again")
    proc.stop(started[-1].reaper, grace=15)
    started[-1] = _spawn("libvirtd")
    _wait_reachable(started, RESTART_TIMEOUT)
    return started[-1].pid


def _serve(started: list[Started], busy: threading.Lock, asks: int, answers: int) -> None:
    """The wrapper's side: one answer line per "restart" line, until CMD closes its end."""
    with os.fdopen(asks, "r") as ask, os.fdopen(answers, "w") as answer:
        for line in ask:
            try:
                if line.strip() != "restart":
                    raise HarnessError(f"unknown request {line.strip()[:40]!r}")
                with busy:  # the daemon is not stopped at the end while it is being replaced
                    answer.write(f"ok {_restart(started)}\n")
            except HarnessError as exc:
                answer.write(f"error {exc.message}\n")
            answer.flush()


def _pipe_is(fd: int, inode: int) -> bool:
    try:
        return os.fstat(fd).st_ino == inode
    except OSError:
        return False


def _control() -> tuple[int, int, int] | None:
    """VMHARNESS_LIBVIRTD, checked: it is an input like any other. Its pipes are this process's only
    when the file descriptors are those very pipes (a child of CMD inherits the variable, mostly not
    the descriptors, and the numbers may name other files there): otherwise no daemon is ours."""
    text = environ.get(ENV)
    if text is None:
        return None
    m = re.fullmatch(r"([0-9]{1,9}):([0-9]{1,4}):([0-9]{1,20}):([0-9]{1,4}):([0-9]{1,20})", text)
    if m is None:
        raise HarnessError(f"{ENV}={text[:40]!r} is not what python -m vmharness.host.libvirt.daemon sets",
                           f"unset {ENV}: it names the libvirtd that wrapper started for its command")
    pid, ask, ask_inode, answer, answer_inode = (int(g) for g in m.groups())
    if not (_pipe_is(ask, ask_inode) and _pipe_is(answer, answer_inode)):
        return None
    return pid, ask, answer


def owned_pid() -> int | None:
    """The PID of the libvirtd that `python -m vmharness.host.libvirt.daemon` started for this process."""
    control = _control()
    if control is None:
        return None
    return _restarted or control[0]


def restart_owned(timeout: float = RESTART_TIMEOUT) -> int:
    """Have the wrapper restart the libvirtd it started for this process; its new PID."""
    global _restarted
    control = _control()
    if control is None:
        raise HarnessError("no libvirtd was started by vmharness for this command", "restart libvirtd yourself")
    _, ask, answer = control
    try:
        os.write(ask, b"restart\n")
        ready, _, _ = select.select([answer], [], [], timeout)
        reply = os.read(answer, 4096).decode(errors="replace").strip() if ready else "error it did not answer"
    except OSError as exc:
        raise HarnessError(f"cannot ask the wrapper that started libvirtd to restart it: {exc.strerror}",
                           f"was {ENV} set by python -m vmharness.host.libvirt.daemon?") from exc
    word, _, rest = reply.partition(" ")
    if word != "ok" or not is_digits(rest):
        raise HarnessError(f"the libvirtd vmharness started was not restarted: {rest or reply}",
                           f"see {LOG_DIR}/libvirtd-vmharness.log")
    _restarted = int(rest)
    return _restarted


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-") or shutil.which(argv[0]) is None:
        what = f"no program {argv[0]!r} to run: " if argv and not argv[0].startswith("-") else ""
        print(f"error: {what}usage: python -m vmharness.host.libvirt.daemon CMD [ARG...] (CMD runs with libvirtd "
              "up)", file=sys.stderr)
        return 2
    got: list[int] = []
    with running() as started:
        code = _call_serving(argv, started, got) if started else _call(argv, {}, (), got)
    return _status(code, got)


def _call_serving(argv: list[str], started: list[Started], got: list[int]) -> int:
    """CMD run as _call runs it, told of the libvirtd started for it and of the pipes on which it may ask
    for a restart, which a thread serves meanwhile."""
    asks, ask = os.pipe()
    answer, answers = os.pipe()
    busy = threading.Lock()
    # the signals go to the main thread, which passes them on to CMD (_call): the thread's mask is its own
    signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
    try:
        threading.Thread(target=_serve, args=(started, busy, asks, answers), daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
    env = {ENV: f"{started[-1].pid}:{ask}:{os.fstat(ask).st_ino}:{answer}:{os.fstat(answer).st_ino}"}
    try:
        return _call(argv, env, (ask, answer), got)
    finally:
        os.close(ask)  # the thread ends when it reads the end of its requests
        os.close(answer)
        busy.acquire()  # a restart under way ends before the daemons are stopped


def _status(code: int, got: list[int]) -> int:
    """The wrapper's exit status, whether it started the daemons or found one answering: 128 + the first
    signal it passed on (as a shell reports a command ended by it), else CMD's own, a CMD killed by a
    signal it did not pass on counted the same way (Popen's -N)."""
    if got:
        return 128 + got[0]
    return 128 - code if code < 0 else code


# What the wrapper passes on to CMD, whose own handling gives back what it took (vmharness.signals), before
# the wrapper stops the daemons: ended by one of these itself, it left libvirtd and virtlogd running. The
# harness's own list, but SIGPIPE (a write's, which Python ignores) and SIGALRM (none is ever set here).
PASSED_ON = set(signals.SIGNALS) - {signal.SIGPIPE, signal.SIGALRM}


def _call(argv: list[str], env: dict[str, str], fds: tuple[int, ...], got: list[int]) -> int:
    """CMD run to its end, each signal in PASSED_ON that comes meanwhile passed on to it (the first noted
    in `got`); its exit status."""
    children: list[subprocess.Popen[bytes]] = []

    def pass_on(signum: int, _frame: object) -> None:
        got.append(signum)
        for child in children:
            if child.returncode is None:
                child.send_signal(signum)
    before = {sig: signal.signal(sig, pass_on) for sig in PASSED_ON}
    try:
        children.append(subprocess.Popen(argv, env={**os.environ, **env}, pass_fds=fds))
        if got:  # one came while it started
            children[0].send_signal(got[0])
        return children[0].wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
