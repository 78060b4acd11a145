"""A harness stopped mid-command stops its child as a user would (SIGTERM, SIGKILL only after a grace),
so that the tool can undo what it did (mmdebstrap unmounts its chroot's /proc, /sys and /dev); and a
build folder that still holds a mount is never removed, since a recursive removal would go on into the
mounted filesystem. Real processes and a real tmpfs mount (the test runs as root, as the suite does)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from vmharness.errors import HarnessError
from vmharness.guest import imagebuild
from vmharness.system import proc

# $1: a file the child makes when SIGTERM reaches it (its own cleanup), then it exits
TRAPS_TERM = 'trap \'touch "$1"; exit 0\' TERM; echo started; while :; do sleep 0.1; done'
IGNORES_TERM = 'trap "" TERM; echo started; while :; do sleep 0.1; done'


class Stopped(Exception):
    """What the harness raises when a signal stops it (as vmharness.signals turns SIGTERM into an error)."""


@pytest.fixture
def stop_in_a_second() -> Iterator[None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_stopped_harness_lets_its_child_clean_up(tmp_path: Path, stop_in_a_second: None) -> None:
    mark = tmp_path / "cleaned up"
    with pytest.raises(Stopped):
        proc.run(["sh", "-c", TRAPS_TERM, "sh", str(mark)], timeout=30)
    assert mark.exists()  # SIGKILL first, as before, left no chance to


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(monkeypatch: pytest.MonkeyPatch,
                                                                stop_in_a_second: None) -> None:
    monkeypatch.setattr(proc, "STOP_GRACE", 1.0)
    began = time.monotonic()
    with pytest.raises(Stopped):
        proc.run(["sh", "-c", IGNORES_TERM], timeout=30)
    assert 1.9 < time.monotonic() - began < 10  # the second until the stop, the grace, then SIGKILL


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs mounted at the /proc of a build's chroot, under a builder's PID that is gone."""
    point = tmp_path / f".build-0123456789abcdef-{_dead_pid()}" / "rootfs" / "proc"
    point.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "vmh-test", str(point)], check=True)
    try:
        (point / "a file of the mounted filesystem").write_text("keep me")
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)


def test_a_build_folder_with_a_mount_in_it_is_not_removed(mounted: Path) -> None:
    build = mounted.parent.parent
    with pytest.raises(HarnessError) as err:
        imagebuild._remove(build)
    assert f"{build} still has 1 filesystem(s) mounted in it ({mounted})" in err.value.message
    assert f"umount -R {mounted}" in (err.value.hint or "")
    assert (mounted / "a file of the mounted filesystem").read_text() == "keep me"
    subprocess.run(["umount", str(mounted)], check=True)
    imagebuild._remove(build)  # unmounted: removed
    assert not build.exists()


def test_a_stale_build_with_a_mount_is_refused_by_the_next_build(mounted: Path) -> None:
    with pytest.raises(HarnessError, match="still has 1 filesystem"):
        imagebuild._stale_builds(mounted.parent.parent.parent)
    assert (mounted / "a file of the mounted filesystem").read_text() == "keep me"


class _Unkillable:
    """A child that outlives SIGKILL, as one held in the kernel does (a vCPU in KVM_RUN on a host whose
    KVM hangs): no real process can be made to, so it stands in for subprocess.Popen here. Its PID is
    this test's own, for the /proc it names."""

    def __init__(self) -> None:
        self.args = ["/usr/bin/qemu-system-x86_64", "-enable-kvm"]
        self.pid = os.getpid()
        self.returncode = None
        self.sent: list[int] = []

    def poll(self) -> None:
        return None

    def send_signal(self, sig: int) -> None:
        self.sent.append(sig)

    def wait(self, timeout: float | None = None) -> int:
        raise subprocess.TimeoutExpired(self.args, timeout or 0.0)


def test_a_child_that_outlives_sigkill_is_one_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "KILL_WAIT", 0.2)
    child = _Unkillable()
    with pytest.raises(HarnessError) as err:
        proc.stop(child, grace=0.1)  # type: ignore[arg-type]
    assert child.sent == [signal.SIGTERM, signal.SIGKILL]
    assert err.value.message.startswith(f"process {child.pid} (qemu-system-x86_64) did not end within 0.2 s of "
                                        "SIGKILL: it is stuck in the kernel, in state ")
    assert f"/proc/{child.pid}/stack" in (err.value.hint or "")


def test_a_child_killed_after_the_grace_is_waited_for(tmp_path: Path) -> None:
    child = proc.spawn(["sh", "-c", IGNORES_TERM], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"started\n"
    assert proc.stop(child, grace=0.3) == -signal.SIGKILL
