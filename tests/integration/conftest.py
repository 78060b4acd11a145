"""Fixtures for tests that boot real VMs: `l1`, one rig shared by the whole session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.rig import Rig

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
