"""Fixtures for tests that boot real VMs: `l1`, one rig shared by the session's modules (a fresh one
after one wedged: tests/rig/session.py); a clean journal
to start from; and `quiet_machine`, for tests that time what they measure, which waits until no rig
runs on this machine (tests/streams.py runs the rig's tests beside the others); and each test on this
machine checked for records it left in the host's journal (`no_journal_left`)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.rig import Rig, kernel_index
from tests.rig.failures import Wedged
from tests.rig.session import SessionRig
from vmharness.errors import HarnessError
from vmharness.host.libvirt import daemon as libvirtd
from vmharness.journal import journal
from vmharness.system import proc
from vmharness.system.root import HostRoot

JOURNAL = Path("/run/vmharness/journal.jsonl")

BOOT_TIMEOUT = 180.0  # about 10 s here; generous for a loaded CI machine


RIG_LOCK = Path("/run/vmharness-tests/rig.lock")  # held shared while a rig runs, exclusive by a timed test


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vm: boots a TCG VM")
    config.addinivalue_line("markers", "slow: double TCG: minutes")
    config.addinivalue_line("markers", "rig: uses the nested-VM rig (tests/streams.py runs these beside the rest)")


# the fixtures that boot a rig: the tests that use one are `rig`'s (`l1` asks `session_rig`, and so do the
# module fixtures that hold L1 for all their tests)
RIGS = ("session_rig", "l1_that_reboots", "own_rigs")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in RIGS):
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
def session_rig() -> Iterator[SessionRig]:
    """The session's L1 (see tests/rig), held under the rig's lock: stopped, with its QEMU gone, when the
    session ends."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    held = SessionRig(lambda: Rig.start(timeout=BOOT_TIMEOUT))
    with _rig_lock(fcntl.LOCK_SH):
        try:
            yield held
        finally:
            held.stop()


@pytest.fixture
def l1(session_rig: SessionRig) -> Rig:
    """The session's L1, asked for per test: the one the test before had unless that one wedged. A test
    whose L1 wedges fails alone, said with L1's console, or goes once more (ONCE_MORE_IF_WEDGED), and the
    next gets a fresh L1. Beside the host's stream (a clean clone, 2026-12-04), L1 wedged in the hugepage
    test's unbind of nic1 (every vCPU halted, the unbind asleep in pci_power_up's usleep_range for 300 s: a
    timer that never expired, docs/testing.md), and the clean-ups in L1 and the next test's set-up each
    failed again on the stopped L1. A module's fixture that holds L1 for all its tests asks `session_rig`."""
    return session_rig.usable()


# For the rig's tests of a few seconds each: a test whose L1 wedged (tests/rig/failures.Wedged: its agent
# silent for 300 s, a task blocked for minutes, a timer lost) runs once more on a fresh L1, with pytest's
# "1 rerun" in the summary and SessionRig's warning that a fresh L1 was booted. Any other failure, or a
# second wedge, is the test's. The long tests go once more by themselves, inside the test (once_more).
ONCE_MORE_IF_WEDGED = pytest.mark.flaky(reruns=1, only_rerun=[Wedged])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that failed for a wedged L1 says why in the warnings' summary, where it runs once more and
    passes too (pytest-rerunfailures keeps only the name of a test it ran again)."""
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(Wedged):
        first = str(call.excinfo.value).splitlines()[0][:500]
        item.warn(pytest.PytestWarning(f"L1 wedged in the test's {call.when}: {first}"))
    return report


@pytest.fixture()
def own_rigs() -> Iterator[None]:
    """For a test that boots rigs of its own (Rig.start with another kernel, another command line): the
    rig's lock held meanwhile, as `l1`'s is."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    with _rig_lock(fcntl.LOCK_SH):
        yield


@pytest.fixture()
def l1_that_reboots() -> Iterator[Rig]:
    """An L1 of the test's own that the harness may reboot with kexec (Rig.start's `host_boots`): the
    session's `l1` keeps the state the other rig tests set up, which a boot would empty. The second host
    kernel (kernel_index.py) is in its /boot with the rig's initramfs for it, for a host boot to name."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    also = (kernel_index.obtain(),)
    with _rig_lock(fcntl.LOCK_SH), Rig.start(timeout=BOOT_TIMEOUT, host_boots=True, also=also) as rig:
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
    said = _restore()
    if said is None:
        return
    print(f"an earlier session left {JOURNAL}; host-restore said:\n{said}")
    if JOURNAL.exists():
        pytest.exit(f"{JOURNAL} from an earlier session could not be restored:\n{said}", 2)


def _restore() -> str | None:
    """What host-restore said, with libvirtd up (the journal may name a guest); None with no journal."""
    if not JOURNAL.exists():
        return None
    res = proc.run([sys.executable, "-m", "vmharness.host.libvirt.daemon", sys.executable, "-m", "vmharness.cli",
                    "host-restore"], timeout=600, check=False)
    return res.stdout + res.stderr


def outstanding() -> set[int]:
    """The journal's records not given back (their sequence numbers): none without a journal."""
    if not JOURNAL.exists():
        return set()
    try:
        return {r["seq"] for r in journal.outstanding(journal.read(HostRoot()))}
    except HarnessError:  # a damaged journal: host-restore says what of it, the test fails below
        return {-1}


@pytest.fixture(autouse=True)
def no_journal_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test on this machine ends with the host as it found it: a record the test left in the
    journal is its error, and where it found none, the host is given back before the next test. CI's
    run of 2ed2e31 failed 14 tests, every one that asserted no journal after the first: one left
    behind was the likely cause, and the tail CI keeps could not say which test had left it. The rig's
    tests are not checked: the host's tests run beside them and journal this host meanwhile. A module's
    guest (test_syscalls.py's) is there before and after each of its tests, and stays."""
    if request.node.get_closest_marker("rig") is not None:
        yield
        return
    before = outstanding()
    yield
    left = outstanding() - before
    if not left:
        return
    records = JOURNAL.read_text(errors="replace") if JOURNAL.exists() else ""
    said = "" if before else f"\nhost-restore said:\n{(_restore() or '')[-2000:]}"
    pytest.fail(f"the test left records {sorted(left)} in {JOURNAL}:\n{records[-2000:]}{said}")


@pytest.fixture(scope="module")
def daemon() -> Iterator[None]:
    """A libvirtd for the module's guests: the one that answers, or one started for them and stopped after
    (vmharness.host.libvirt.daemon.running)."""
    with libvirtd.running():
        yield
