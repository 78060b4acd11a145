"""host-groups against synthetic hosts: viability, multi-function cards, bridges, devices in use."""

from __future__ import annotations

from tests.fakehost import FakeHost
from vmharness.host.inspect import iommu
from vmharness.host.inspect.pci import PciDevice, scan
from vmharness.system.root import HostRoot

MLX, CX5 = 0x15B3, 0x1019


def dual_port(host: FakeHost, driver: str = "mlx5_core") -> None:
    host.pci("0000:b3:00.0", MLX, CX5, driver=driver, group=40, numa=1, netdevs=("ens1f0",))
    host.pci("0000:b3:00.1", MLX, CX5, driver=driver, group=40, numa=1, netdevs=("ens1f1",))


def by_number(host: FakeHost) -> dict[int, iommu.Group]:
    return {g.number: g for g in iommu.groups(HostRoot(host.base))}


def test_dual_port_nic_shares_one_group(host: FakeHost) -> None:
    dual_port(host)
    g = by_number(host)[40]
    assert [m.dev.bdf for m in g.members] == ["0000:b3:00.0", "0000:b3:00.1"]
    assert g.multifunction == [["0000:b3:00.0", "0000:b3:00.1"]]
    assert not g.viable
    assert [d.bdf for d in g.blockers] == ["0000:b3:00.0", "0000:b3:00.1"]
    assert all(m.dev.numa_node == 1 for m in g.members)


def test_group_viable_once_every_function_is_on_vfio(host: FakeHost) -> None:
    dual_port(host, driver="vfio-pci")
    assert by_number(host)[40].viable


def test_one_port_left_on_its_driver_blocks_the_group(host: FakeHost) -> None:
    host.pci("0000:b3:00.0", MLX, CX5, driver="vfio-pci", group=40)
    host.pci("0000:b3:00.1", MLX, CX5, driver="mlx5_core", group=40)
    g = by_number(host)[40]
    assert [d.bdf for d in g.blockers] == ["0000:b3:00.1"]


def test_group_with_pcie_bridge(host: FakeHost) -> None:
    host.pci("0000:00:1c.0", 0x8086, 0xA110, 0x060400, driver="pcieport", group=7)
    host.pci("0000:02:00.0", 0x8086, 0x1533, driver="vfio-pci", group=7, parent="0000:00:1c.0")
    host.pci("0000:02:00.1", 0x8086, 0x1533, group=7, parent="0000:00:1c.0")  # driverless
    g = by_number(host)[7]
    assert g.viable, "a bridge on pcieport and a driverless function do not block VFIO"
    assert g.members[0].dev.is_bridge
    assert g.multifunction == [["0000:02:00.0", "0000:02:00.1"]], "the bridge is no function of the card"
    assert host.devdir("0000:02:00.0").endswith("0000:00:1c.0/0000:02:00.0")


def test_bridge_on_another_driver_blocks(host: FakeHost) -> None:
    host.pci("0000:00:1c.0", 0x8086, 0xA110, 0x060400, driver="shpchp", group=7)
    assert not by_number(host)[7].viable


def test_nic_enslaved_to_bond_with_default_route_is_in_use(host: FakeHost) -> None:
    host.pci("0000:3b:00.0", 0x8086, 0x1572, driver="i40e", group=20, netdevs=("eno1",))
    host.pci("0000:3b:00.1", 0x8086, 0x1572, driver="i40e", group=21, netdevs=("eno2",))
    host.virtual_netdev("bond0")
    host.enslave("eno1", "bond0")
    host.address("bond0", "10.1.2.3", 24)
    host.route("bond0", "0.0.0.0", "0.0.0.0", gateway="10.1.2.1")
    views = {v.dev.bdf: v for v in iommu.device_views(HostRoot(host.base), _scan(host))}
    why = str(views["0000:3b:00.0"].active["eno1"])
    assert why.startswith("eno1 → bond0 holds ")
    assert "default route" in why and "address 10.1.2.3" in why
    assert views["0000:3b:00.1"].active == {}


def test_bond_inside_bridge_and_ipv6_only(host: FakeHost) -> None:
    host.pci("0000:3b:00.0", 0x8086, 0x1572, driver="i40e", group=20, netdevs=("eno1",))
    host.virtual_netdev("bond0")
    host.virtual_netdev("br0")
    host.enslave("eno1", "bond0")
    host.enslave("bond0", "br0")
    host.address6("br0", "2001:db8::5")
    host.address6("eno1", "fe80::1", scope="20")  # link-local alone does not count
    views = iommu.device_views(HostRoot(host.base), _scan(host))
    assert views[0].to_json()["active"] == {"eno1": "eno1 → bond0 → br0 holds address 2001:db8::5"}


def test_virtio_netdev_found_one_level_down(host: FakeHost) -> None:
    host.pci("0000:00:03.0", 0x1AF4, 0x1041, driver="virtio-pci", netdevs=("eth0",), virtio=True)
    (view,) = iommu.device_views(HostRoot(host.base), _scan(host))
    assert [n.name for n in view.dev.netdevs] == ["eth0"]


def test_sriov_and_reset_methods(host: FakeHost) -> None:
    host.pci("0000:b3:00.0", MLX, CX5, driver="mlx5_core", group=40, sriov=(4, 8), reset="bus")
    host.pci("0000:b3:00.2", MLX, 0x101A, driver="mlx5_core", group=41, physfn="0000:b3:00.0", reset=None)
    devs = {d.bdf: d for d in _scan(host)}
    pf, vf = devs["0000:b3:00.0"], devs["0000:b3:00.2"]
    assert (pf.sriov_numvfs, pf.sriov_totalvfs, pf.reset_methods) == (4, 8, ("bus",))
    assert vf.physfn == "0000:b3:00.0" and vf.reset_methods is None


def _scan(host: FakeHost) -> list[PciDevice]:
    return scan(HostRoot(host.base))


def test_cli_text_makes_cards_and_blockers_obvious(cli, host: FakeHost) -> None:
    dual_port(host)
    host.address("ens1f0", "192.0.2.10", 24)
    code, out, _ = cli("host-groups", "--host-root", str(host.base))
    assert code == 0
    assert "IOMMU group 40 (DMA): NOT viable: 0000:b3:00.0 (mlx5_core), 0000:b3:00.1 (mlx5_core)" in out
    assert "multi-function device: 0000:b3:00.0, 0000:b3:00.1 share this group and move together" in out
    assert "ens1f0 [IN USE: route 192.0.2.0/24, address 192.0.2.10]" in out
    assert "!0000:b3:00.1" in out


def test_cli_filters(cli, host: FakeHost) -> None:
    dual_port(host)
    host.pci("0000:00:17.0", 0x8086, 0xA352, 0x010601, driver="ahci", group=5)
    data = cli.json("host-groups", "--host-root", str(host.base), "--class", "network")
    assert [g["group"] for g in data["groups"]] == [40]
    data = cli.json("host-groups", "--host-root", str(host.base), "--class", "01")
    assert [g["group"] for g in data["groups"]] == [5]
    data = cli.json("host-groups", "--host-root", str(host.base), "--bdf", "b3:00.1")
    assert [g["group"] for g in data["groups"]] == [40]
    assert data["groups"][0]["devices"][1]["netdevs"] == ["ens1f1"]


def test_no_iommu_lists_devices_and_says_so(cli, tmp_path) -> None:
    host = FakeHost(tmp_path, iommu_units=())
    host.pci("0000:00:03.0", 0x1AF4, 0x1041, driver="virtio-pci", netdevs=("eth0",), virtio=True)
    code, out, _ = cli("host-groups", "--host-root", str(host.base))
    assert code == 0 and out.startswith("no IOMMU groups: the kernel has no IOMMU enabled")
    assert "0000:00:03.0" in out
