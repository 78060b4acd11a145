"""Fixtures for tests that boot real VMs: `l1`, one rig shared by the whole session; and a clean
journal to start from."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig import Rig
from vmharness import proc

JOURNAL = Path("/run/vmharness/journal.jsonl")

BOOT_TIMEOUT = 180.0  # about 10 s here; generous for a loaded CI machine


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vm: boots a TCG VM")
    config.addinivalue_line("markers", "slow: double TCG: minutes")


@pytest.fixture(scope="session")
def l1() -> Iterator[Rig]:
    """A booted L1 (see tests/rig): stopped, with its QEMU gone, when the session ends."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
    with Rig.start(timeout=BOOT_TIMEOUT) as rig:
        yield rig


@pytest.fixture(scope="session", autouse=True)
def journal_left_by_an_earlier_session() -> None:
    """The tests check that each command leaves no journal. One left by an earlier test session that
    was killed (a machine can be reused) would fail them all, so it is given back first, by the
    harness's own host-restore (with libvirtd up, in case it names a guest)."""
    if not JOURNAL.exists():
        return
    res = proc.run([sys.executable, "-m", "vmharness.host.libvirtd", sys.executable, "-m", "vmharness.cli",
                    "host-restore"], timeout=600, check=False)
    print(f"an earlier session left {JOURNAL}; host-restore said:\n{res.stdout}{res.stderr}")
    if JOURNAL.exists():
        pytest.exit(f"{JOURNAL} from an earlier session could not be restored:\n{res.stdout}{res.stderr}", 2)
