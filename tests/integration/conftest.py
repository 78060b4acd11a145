"""Fixtures for tests that boot real VMs: `l1`, one rig shared by the whole session; a clean journal
to start from; and `quiet_machine`, for tests that time what they measure, which waits until no rig
runs on this machine (tests/streams.py runs the rig's tests beside the others)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.rig import Rig
from vmharness.host.libvirt import daemon as libvirtd
from vmharness.system import proc

JOURNAL = Path("/run/vmharness/journal.jsonl")

BOOT_TIMEOUT = 180.0  # about 10 s here; generous for a loaded CI machine


RIG_LOCK = Path("/run/vmharness-tests/rig.lock")  # held shared while a rig runs, exclusive by a timed test


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vm: boots a TCG VM")
    config.addinivalue_line("markers", "slow: double TCG: minutes")
    config.addinivalue_line("markers", "rig: uses the nested-VM rig (tests/streams.py runs these beside the rest)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "l1" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.rig)


@contextmanager
def _rig_lock(mode: int) -> Iterator[None]:
    RIG_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with RIG_LOCK.open("a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def l1() -> Iterator[Rig]:
    """A booted L1 (see tests/rig): stopped, with its QEMU gone, when the session ends."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    with _rig_lock(fcntl.LOCK_SH), Rig.start(timeout=BOOT_TIMEOUT) as rig:
        yield rig


@pytest.fixture()
def quiet_machine() -> Iterator[None]:
    """For a test whose assertions are timings: it waits until no rig runs on this machine."""
    with _rig_lock(fcntl.LOCK_EX):
        yield


@pytest.fixture(scope="session", autouse=True)
def journal_left_by_an_earlier_session() -> None:
    """The tests check that each command leaves no journal. One left by an earlier test session that
    was killed (a machine can be reused) would fail them all, so it is given back first; unless
    tests/streams.py did that before it started this session beside another, which may be measuring
    by now."""
    if not os.environ.get("VMHARNESS_TEST_STREAMS"):
        give_back_leftovers()


def give_back_leftovers() -> None:
    """An earlier session's journal given back by the harness's own host-restore (with libvirtd up, in
    case it names a guest)."""
    if not JOURNAL.exists():
        return
    res = proc.run([sys.executable, "-m", "vmharness.host.libvirt.daemon", sys.executable, "-m", "vmharness.cli",
                    "host-restore"], timeout=600, check=False)
    print(f"an earlier session left {JOURNAL}; host-restore said:\n{res.stdout}{res.stderr}")
    if JOURNAL.exists():
        pytest.exit(f"{JOURNAL} from an earlier session could not be restored:\n{res.stdout}{res.stderr}", 2)


@pytest.fixture(scope="module")
def daemon() -> Iterator[None]:
    """A libvirtd for the module's guests: the one that answers, or one started for them and stopped after
    (vmharness.host.libvirt.daemon.running)."""
    with libvirtd.running():
        yield
