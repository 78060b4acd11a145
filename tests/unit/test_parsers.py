"""Pure parsers: PCI addresses, pci.ids, /proc/net text, hugepage sizes."""

from __future__ import annotations

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages, pciids
from vmharness.host.inspect.net import routes, survey
from vmharness.model.bdf import parse_bdf
from vmharness.system.root import HostRoot


@pytest.mark.parametrize(("text", "bdf"), [
    ("0000:b3:00.0", "0000:b3:00.0"),
    ("B3:00.1", "0000:b3:00.1"),
    ("0001:00:1f.7", "0001:00:1f.7"),
])
def test_bdf_accepted(text: str, bdf: str) -> None:
    assert parse_bdf(text) == bdf


@pytest.mark.parametrize("text", ["b3:00", "0000:b3:00.8", "zz:00.0", "0000:b3:00.0.1", ""])
def test_bdf_rejected(text: str) -> None:
    # Each of these fails the address's shape, so each gets the same error and hint, word for word.
    with pytest.raises(HarnessError) as e:
        parse_bdf(text)
    assert (e.value.message, e.value.hint) == (
        f"{text!r} is not a PCI address", "write it as DDDD:BB:DD.F or BB:DD.F, e.g. 0000:b3:00.0 (see `lspci -D`)")


@pytest.mark.parametrize(("text", "dev"), [("00:20.0", "20"), ("0000:b3:FF.1", "FF")])
def test_a_device_number_above_1f_is_named(text: str, dev: str) -> None:
    with pytest.raises(HarnessError) as e:
        parse_bdf(text, "--bdf")
    assert (e.value.message, e.value.hint) == (
        f"--bdf {text!r} is not a PCI address: device number {dev} is above 1f",
        "the device part of DDDD:BB:DD.F runs from 00 to 1f")


PCI_IDS = """\
# comment
8086  Intel Corporation
\t10d3  82574L Gigabit Network Connection
\t\t8086 a01f  Gigabit CT Desktop Adapter
15b3  Mellanox Technologies
\t1019  MT28800 Family [ConnectX-5 Ex]
C 02  Network controller
\t00  Ethernet controller
C 06  Bridge
\t04  PCI bridge
"""


def test_pciids_parse() -> None:
    ids = pciids.parse(PCI_IDS)
    assert ids.vendor(0x8086) == "Intel Corporation"
    assert ids.device(0x15B3, 0x1019) == "MT28800 Family [ConnectX-5 Ex]"
    assert ids.device(0x8086, 0xA01F) is None, "subsystem lines are not devices"
    assert ids.class_name(0x020000) == "Ethernet controller"
    assert ids.class_name(0x060400) == "PCI bridge"
    assert ids.class_name(0x020800) == "Network controller", "unknown subclass falls back to the class"
    assert pciids.PciIds().class_name(0x020000) == "network", "no database: the built-in base names"


def test_routes_and_addresses(host: FakeHost) -> None:
    host.address("eth1", "198.18.0.1", 24)
    host.address("eth1", "198.18.0.77", 32)  # /32: only the host route would match; here its own
    host.route("eth2", "0.0.0.0", "0.0.0.0", gateway="198.18.0.254")
    root = HostRoot(host.base)
    r4 = routes.routes4(root)
    assert [str(r.network) for r in r4] == ["198.18.0.0/24", "198.18.0.77/32", "0.0.0.0/0"]
    assert r4[2].is_default and str(r4[2].gateway) == "198.18.0.254"
    held = survey.reasons(root)
    assert held.by_iface["eth2"] == ["default route"] and held.unreadable == []
    assert "address 198.18.0.1" in held.by_iface["eth1"] and "address 198.18.0.77" in held.by_iface["eth1"]


def test_fib_trie_of_this_kernel_format() -> None:
    # the shape /proc/net/fib_trie has on Linux 6.x (Main and Local tables, leaves with |--)
    text = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.1
              /32 host LOCAL
     +-- 192.0.2.0/24 2 0 2
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.2
              /32 host LOCAL
Local:
           |-- 192.0.2.2
              /32 host LOCAL
"""

    class Root(HostRoot):
        def read_optional(self, p: object, *, limit: int = 0) -> str | None:
            return text

    assert [str(a) for a in routes.local_addrs4(Root("/nonexistent"))] == ["192.0.2.2"]


@pytest.mark.parametrize(("text", "kib"), [("2M", 2048), ("1G", 1048576), ("1024M", 1048576),
                                            ("2048kB", 2048), ("2048", 2048), ("x", None)])
def test_hugepage_sizes(text: str, kib: int | None) -> None:
    assert hugepages.parse_size_kib(text) == kib
