"""The L2 console parser of the test rig: device lines and the marker, noise ignored; and how the rig tells
that `timeout` ended L2's QEMU."""

from __future__ import annotations

import pytest

from tests.rig import l2
from tests.rig.l2 import PciDevice, parse


def test_parse_devices_and_marker() -> None:
    console = (
        "[    0.000000] Linux version 6.1.0\r\n"
        "L2-PCI 0000:00:00.0 8086:29c0 0x060000\r\n"
        "L2-PCI 0000:00:02.0 8086:10d3 0x020000\n"
        "noise L2-PCI broken line\n"
        "L2-DONE 29.35\n"
    )
    devices, uptime = parse(console)
    assert devices == (PciDevice("0000:00:00.0", "8086", "29c0", 0x060000),
                       PciDevice("0000:00:02.0", "8086", "10d3", 0x020000))
    assert uptime == 29.35


def test_parse_without_marker() -> None:
    assert parse("L2-PCI 0000:00:02.0 8086:10d3 0x020000\n") == (
        (PciDevice("0000:00:02.0", "8086", "10d3", 0x020000),), None)


@pytest.mark.parametrize(("code", "seconds", "ended"), [
    (124, 10.2, True),  # QEMU took the SIGTERM
    (137, 20.3, True),
    (-9, 20.4, True),  # QEMU did not act on the SIGTERM in time: `timeout` SIGKILLed its group, itself too
    (-9, 3.0, False),  # a SIGKILL from elsewhere, long before `timeout` would send one
    (0, 10.5, False),
    (1, 2.0, False),
    (None, 40.0, False),
])
def test_timeout_ending_l2s_qemu_is_told_by_its_status_and_time(code: int | None, seconds: float, ended: bool) -> None:
    assert l2.timed_out(code, seconds, 10.0) is ended
