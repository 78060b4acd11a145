"""The L2 console parser of the test rig: device lines and the marker, noise ignored."""

from __future__ import annotations

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
