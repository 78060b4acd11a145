"""The waiter woken by real kernel events on this machine: "change" written into the uevent file of a
virtual device (the loopback interface, the cpu_dma_latency misc device) makes the kernel send a
uevent and changes nothing else. Root, because only root may write a uevent file. A second or so."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from vmharness.system.uevent import RECHECK_INTERVAL, Waiter

pytestmark = pytest.mark.integration

LO = Path("/sys/devices/virtual/net/lo")
MISC = Path("/sys/devices/virtual/misc/cpu_dma_latency")


@pytest.fixture(autouse=True)
def _root_and_devices() -> None:
    if os.geteuid() != 0:
        pytest.skip("writing a uevent file needs root")
    for dev in (LO, MISC):
        if not (dev / "uevent").exists():
            pytest.skip(f"{dev} is not on this kernel")


@contextmanager
def announced(*devices: Path, after: float = 0.1) -> Iterator[threading.Event]:
    """In `after` seconds: set the flag, then make the kernel announce each device in turn."""
    flag = threading.Event()

    def announce() -> None:
        time.sleep(after)
        flag.set()
        for dev in devices:
            (dev / "uevent").write_text("change")

    thread = threading.Thread(target=announce)
    thread.start()
    try:
        yield flag
    finally:
        thread.join(timeout=5)


def test_a_kernel_event_wakes_the_waiter_long_before_it_would_read_the_condition_again() -> None:
    with Waiter(("net",)) as waiter, announced(LO) as flag:
        assert waiter.polling is None, waiter.polling
        began = time.monotonic()
        assert waiter.wait(flag.is_set, timeout=10)
        took = time.monotonic() - began
    assert f"change {LO}" in waiter.heard
    # woken by the event at about 0.1 s; without it the condition is read again only after 1 s
    assert took < RECHECK_INTERVAL * 0.6, f"returned after {took:.2f} s, heard {list(waiter.heard)}"


def test_events_of_a_subsystem_the_waiter_did_not_ask_for_do_not_wake_it() -> None:
    with Waiter(("net",)) as waiter, announced(MISC, LO) as flag:
        assert waiter.wait(flag.is_set, timeout=10)
    assert f"change {LO}" in waiter.heard
    assert not any(str(MISC) in h for h in waiter.heard), list(waiter.heard)
