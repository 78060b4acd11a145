"""The libvirtd that vmharness starts where none answers (vmharness.host.libvirt.daemon.running), for
real: beside a virtlogd that serves already, it starts libvirtd alone, uses that virtlogd and leaves
it running; with none, it starts both and stops both. A clean clone's test_study.py once failed at
its set-up because a virtlogd left over held the PID file: the second one exited at once, and that
read as libvirtd failing to start."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmharness.host.inspect import probes
from vmharness.host.libvirt import daemon as libvirtd
from vmharness.system import proc

pytestmark = pytest.mark.integration


SYSTEMD = Path("/run/systemd/system")  # systemd is this boot's init (sd_booted(3)), and starts libvirt's daemons


@pytest.fixture()
def no_daemon() -> None:
    """None of libvirt's daemons answers. Where systemd runs, the machine's own may (socket-activated), and
    this test cannot judge; without systemd (CI, the rig) one that answers is a test's that was left up."""
    if shutil.which("libvirtd") is None:
        pytest.skip("libvirtd is not installed (apt-get install libvirt-daemon-system)")
    up = [name for name, answers in (("libvirtd", probes.libvirtd()["reachable"]),
                                     ("virtlogd", probes.answers(libvirtd.VIRTLOGD_SOCKET))) if answers]
    if up and SYSTEMD.is_dir():
        pytest.skip(f"already answering under systemd: {', '.join(up)}; this test needs none running")
    assert not up, f"already answering: {', '.join(up)}; left up by an earlier test? (this test starts its own)"


@pytest.fixture()
def a_virtlogd(no_daemon: None) -> Iterator[subprocess.Popen[bytes]]:
    """A virtlogd started by the test itself, serving before running() is called; stopped by its PID."""
    p = proc.spawn(["virtlogd"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not probes.answers(libvirtd.VIRTLOGD_SOCKET):
            assert p.poll() is None and time.monotonic() < deadline, "the test's virtlogd did not start"
            time.sleep(0.1)
        yield p
    finally:
        proc.stop(p, grace=15)


def _names(started: list[libvirtd.Started]) -> list[str]:
    return [p.name for p in started]


def test_beside_a_virtlogd_that_serves_only_libvirtd_is_started_and_that_virtlogd_stays(
        a_virtlogd: subprocess.Popen[bytes]) -> None:
    with libvirtd.running() as started:
        assert _names(started) == ["libvirtd"]
        assert probes.libvirtd()["reachable"]
    assert started[0].poll() is not None, "the libvirtd it started is stopped at the end"
    assert a_virtlogd.poll() is None and probes.answers(libvirtd.VIRTLOGD_SOCKET), "the virtlogd it found still serves"


def test_with_no_daemon_both_are_started_and_both_stopped(no_daemon: None) -> None:
    with libvirtd.running() as started:
        assert _names(started) == ["virtlogd", "libvirtd"]
        assert probes.libvirtd()["reachable"] and probes.answers(libvirtd.VIRTLOGD_SOCKET)
        # each daemon under its reaper (vmharness.system.reaper), the PID said being the daemon's own
        assert [(_stat(p.pid)[0], int(_stat(p.pid)[2])) for p in started] == [(p.name, p.reaper.pid) for p in started]
    assert all(p.poll() is not None for p in started)
    assert all(not Path(f"/proc/{p.pid}").exists() for p in started), "a daemon outlived its reaper"
    assert not probes.libvirtd()["reachable"] and not probes.answers(libvirtd.VIRTLOGD_SOCKET)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_the_wrapper_ended_by_a_signal_passes_it_on_then_stops_its_daemons(no_daemon: None,
                                                                          sig: signal.Signals) -> None:
    """`python -m vmharness.host.libvirt.daemon CMD` (`make demo`'s) sent SIGTERM or SIGHUP alone: CMD gets it
    and ends, then the daemons the wrapper started are stopped. Before, the wrapper died at once and left
    libvirtd and virtlogd running (found beside a demo stopped by `pkill`)."""
    wrapper = proc.spawn([sys.executable, "-m", "vmharness.host.libvirt.daemon", "sleep", "120"])
    try:
        deadline = time.monotonic() + 120
        while not (probes.libvirtd()["reachable"] and _child_of(wrapper.pid, "sleep")):
            assert wrapper.poll() is None and time.monotonic() < deadline, "the wrapper did not start its command"
            time.sleep(0.2)
        sleeper = _child_of(wrapper.pid, "sleep")
        wrapper.send_signal(sig)
        assert wrapper.wait(timeout=60) == 128 + sig
        assert sleeper is not None and not Path(f"/proc/{sleeper}").exists()
        assert not probes.libvirtd()["reachable"] and not probes.answers(libvirtd.VIRTLOGD_SOCKET)
    finally:
        if wrapper.poll() is None:
            proc.stop(wrapper, grace=30)


def test_beside_a_libvirtd_that_answers_the_wrapper_passes_a_signal_on_and_says_it_the_same_way(
        no_daemon: None) -> None:
    """Where a libvirtd answers already, the wrapper starts none and stops none; a SIGTERM it passes on ends
    CMD, and its own status is 128 + SIGTERM, as where it started the daemons (it returned CMD's status,
    -15 as Popen reads it, so the shell saw 241)."""
    with libvirtd.running() as ours:
        wrapper = proc.spawn([sys.executable, "-m", "vmharness.host.libvirt.daemon", "sleep", "120"])
        try:
            deadline = time.monotonic() + 60
            while _child_of(wrapper.pid, "sleep") is None:
                assert wrapper.poll() is None and time.monotonic() < deadline, "the wrapper did not start its command"
                time.sleep(0.2)
            wrapper.send_signal(signal.SIGTERM)
            assert wrapper.wait(timeout=60) == 128 + signal.SIGTERM
            assert all(p.poll() is None for p in ours) and probes.libvirtd()["reachable"], "not the wrapper's to stop"
        finally:
            if wrapper.poll() is None:
                proc.stop(wrapper, grace=30)


def _stat(pid: int) -> list[str]:
    """A process's name, then the fields of its stat after it (state, parent's PID, ...)."""
    name, _, rest = Path(f"/proc/{pid}/stat").read_text().rpartition(")")
    return [name.partition("(")[2], *rest.split()]


def _child_of(pid: int, comm: str) -> int | None:
    """The PID of `pid`'s child named `comm`, if there is one."""
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_text().strip() == comm and \
                    (d / "stat").read_text().rpartition(")")[2].split()[1] == str(pid):
                return int(d.name)
        except OSError:
            continue
    return None
