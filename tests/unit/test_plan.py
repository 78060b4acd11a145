"""host-prepare's plan and every refusal, on synthetic hosts (nothing is executed here: binding needs a
kernel, and the VM tests do that for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.host.prepare import bind, plan  # noqa: F401  (bind registers the op test_second_prepare journals)
from vmharness.journal import journal, restore
from vmharness.system.root import HostRoot

MLX, CX5 = 0x15B3, 0x1019


def two_node_host(tmp_path: Path, **kw: object) -> FakeHost:
    host = FakeHost(tmp_path / "root", nodes=2, node_mib=1024, **kw)  # type: ignore[arg-type]
    host.pci("0000:80:00.0", 0x1B36, 0x000C, 0x060400, driver="pcieport", group=6, numa=1)
    host.pci("0000:81:00.0", MLX, CX5, driver="mlx5_core", group=7, numa=1, netdevs=("ens1f0",),
             parent="0000:80:00.0", reset="flr bus")
    host.pci("0000:81:00.1", MLX, CX5, driver="mlx5_core", group=7, numa=1, netdevs=("ens1f1",),
             parent="0000:80:00.0", reset="pm bus")
    host.pci("0000:00:02.0", 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
    host.address("eth0", "198.18.0.1", 24)
    host.route("eth0", "0.0.0.0", "0.0.0.0", gateway="198.18.0.254")
    return host


def make(host: FakeHost, *bdfs: str, **kw: object) -> plan.Plan:
    return plan.make(HostRoot(host.base), plan.Request(tuple(bdfs), **kw))  # type: ignore[arg-type]


def refused(host: FakeHost, *bdfs: str, **kw: object) -> HarnessError:
    with pytest.raises(HarnessError) as e:
        make(host, *bdfs, **kw)
    return e.value


def test_whole_group_moves_and_the_sibling_is_named(tmp_path: Path) -> None:
    p = make(two_node_host(tmp_path), "81:00.0")
    assert p.groups == [7]
    assert [(b.bdf, b.driver, b.named) for b in p.binds] == [
        ("0000:81:00.0", "mlx5_core", True), ("0000:81:00.1", "mlx5_core", False)]
    assert p.binds[1].netdevs == ("ens1f1",)
    assert p.modules == ["vfio-pci", "vfio_iommu_type1"]
    assert p.stays == [], "the root port sits in its own group here"
    assert any("0000:81:00.1 has no FLR" in w for w in p.warnings)
    assert not any("0000:81:00.0 has no FLR" in w for w in p.warnings)


def test_bridge_in_the_group_stays(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root")
    host.pci("0000:00:1c.0", 0x8086, 0xA110, 0x060400, driver="pcieport", group=9)
    host.pci("0000:02:00.0", 0x8086, 0x1533, driver="igb", group=9, parent="0000:00:1c.0")
    p = make(host, "02:00.0")
    assert [b.bdf for b in p.binds] == ["0000:02:00.0"]
    assert p.stays == ["0000:00:1c.0 (PCI bridge, pcieport) stays"]


def test_refuses_the_routed_nic(tmp_path: Path) -> None:
    e = refused(two_node_host(tmp_path), "0000:00:02.0")
    assert "0000:00:02.0 (eth0) holds " in e.message and "default route" in e.message
    assert "probably your SSH connection" in e.message and "--force" in e.hint


def test_refuses_when_a_group_sibling_is_routed(tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    host.address("ens1f1", "10.9.9.9", 24)
    e = refused(host, "0000:81:00.0")
    assert "0000:81:00.1 (ens1f1)" in e.message


def test_refuses_a_nic_whose_bond_holds_the_route(tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    host.virtual_netdev("bond0")
    host.enslave("ens1f0", "bond0")
    host.address("bond0", "10.1.1.2", 24)
    assert "0000:81:00.0 (ens1f0) → bond0 holds " in refused(host, "81:00.0").message


def test_force_takes_the_routed_nic_with_a_warning(tmp_path: Path) -> None:
    p = make(two_node_host(tmp_path), "0000:00:02.0", force=True)
    assert [b.bdf for b in p.binds] == ["0000:00:02.0"]
    assert any(w.startswith("--force: 0000:00:02.0 (eth0) holds") and "default route" in w for w in p.warnings)


def test_refuses_a_bridge(tmp_path: Path) -> None:
    assert "not an endpoint" in refused(two_node_host(tmp_path), "0000:80:00.0").message


def test_refuses_when_firmware_has_no_iommu(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root", acpi_tables=("APIC",), iommu_units=())
    host.pci("0000:02:00.0", 0x8086, 0x1533, driver="igb")
    e = refused(host, "02:00.0")
    assert e.message.startswith("the IOMMU is off in the firmware")


def test_refuses_when_the_cmdline_lacks_intel_iommu(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root", cmdline="root=/dev/sda1", iommu_units=())
    host.pci("0000:02:00.0", 0x8086, 0x1533, driver="igb")
    e = refused(host, "02:00.0")
    assert e.message.startswith("the IOMMU is off in the kernel") and "intel_iommu=on" in e.hint


def test_refuses_a_pf_with_active_vfs(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root")
    host.pci("0000:b3:00.0", MLX, CX5, driver="mlx5_core", group=40, sriov=(4, 8))
    e = refused(host, "b3:00.0")
    assert "4 SR-IOV VFs active" in e.message and "sriov_numvfs" in e.hint


def test_refuses_a_group_used_by_a_running_domain(tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    host.write("run/libvirt/qemu/web1.xml", """<domstatus><domain type='kvm'><name>web1</name><devices>
      <hostdev mode='subsystem' type='pci' managed='yes'><source>
        <address domain='0x0000' bus='0x81' slot='0x00' function='0x1'/></source></hostdev>
      </devices></domain></domstatus>""")
    e = refused(host, "81:00.0")
    assert "in use by libvirt domain web1 (0000:81:00.1)" in e.message


def test_unknown_and_malformed_devices(tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    assert "no PCI device 0000:99:00.0" in refused(host, "99:00.0").message
    assert "not a PCI address" in refused(host, "99:00").message
    assert "nothing to prepare" in refused(host).message


def test_hugepages_default_to_the_nics_node(tmp_path: Path) -> None:
    p = make(two_node_host(tmp_path), "81:00.0", hugepages="256M", pagesize="2M")
    assert p.pages is not None
    assert (p.pages.node, p.pages.size_kib, p.pages.before, p.pages.target, p.pages.needed) == (1, 2048, 0, 128, 128)
    assert p.mount == "/run/vmharness/hugepages-2M"
    assert "hugepages on node 1 (the NIC's node)" in p.notes


def test_hugepages_count_what_is_free_already(tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    d = "sys/devices/system/node/node0/hugepages/hugepages-2048kB"
    host.write(f"{d}/nr_hugepages", "100\n")
    host.write(f"{d}/free_hugepages", "60\n")  # 40 in use by someone
    host.mount("hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0")
    p = make(host, hugepages="256M", node="0")
    assert p.pages is not None and (p.pages.before, p.pages.target) == (100, 168)
    assert p.mount is None and p.mount_existing == "/dev/hugepages"
    p = make(host, hugepages="100M", node="0")
    assert p.pages is not None and p.pages.target == 100 and p.changes_nothing


def test_a_mount_of_another_pagesize_is_not_enough(tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    host.mount("hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0")
    p = make(host, "81:00.0", hugepages="1G", pagesize="1G")
    assert p.mount == "/run/vmharness/hugepages-1G"


def test_hugepage_refusals(tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    e = refused(host, "81:00.0", hugepages="2G", pagesize="1G")
    assert "2 x 1G pages do not fit on node 1, which has 1024 MiB in all" in e.message
    assert "not a NUMA node" in refused(host, hugepages="1G", node="5").message
    assert "not an amount of memory" in refused(host, hugepages="lots").message
    assert "not supported here" in refused(host, hugepages="1G", pagesize="16G").message


def test_second_prepare_of_the_same_device_is_a_no_op(tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root")
    host.pci("0000:02:00.0", 0x8086, 0x1533, driver="vfio-pci", group=9)
    root = HostRoot(host.base, allow_writes=True)
    journal.record(root, {"op": "bind", "bdf": "0000:02:00.0", "driver": "igb", "override": None}, "host-prepare")
    assert [r["bdf"] for r in restore.pending(root)] == ["0000:02:00.0"]
    p = make(host, "02:00.0")
    assert p.binds == [] and p.changes_nothing
    assert p.notes == ["0000:02:00.0 is already on vfio-pci (prepared earlier by vmharness)"]


def test_cli_dry_run_on_a_snapshot_root(cli, tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    code, out, err = cli("host-prepare", "--host-root", str(host.base), "--bdf", "81:00.0",
                         "--hugepages", "256M", "--dry-run")
    assert code == 0, err
    assert "0000:81:00.1  mlx5_core -> vfio-pci  (same IOMMU group: comes along; netdev ens1f1" in out
    assert "hugepages: node 1, 2M pages 0 -> 128; 128 free for the guest (256 MiB)" in out
    data = cli.json("host-prepare", "--host-root", str(host.base), "--bdf", "81:00.0", "--dry-run")
    assert [b["bdf"] for b in data["binds"]] == ["0000:81:00.0", "0000:81:00.1"]


def test_cli_refuses_to_change_a_snapshot_root(cli, tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    code, _, err = cli("host-prepare", "--host-root", str(host.base), "--bdf", "81:00.0")
    assert code == 2 and err.startswith("error: host-prepare changes the live host")
    code, _, err = cli("host-restore", "--host-root", str(host.base))
    assert code == 2 and "--dry-run" in err


def test_host_setup_prints_the_persistent_form(cli, tmp_path: Path) -> None:
    host = two_node_host(tmp_path)
    host.link("sys/bus/pci/drivers/mlx5_core/module", "sys/module/mlx5_core")
    code, _, err = cli("host-setup", "--print", "--host-root", str(host.base), "--bdf", "81:00.0",
                       "--hugepages", "8G", "--hugepage-size", "1G")
    assert code == 2 and "8 x 1G pages do not fit on node 1" in err
    code, out, err = cli("host-setup", "--print", "--host-root", str(host.base), "--bdf", "81:00.0",
                         "--hugepages", "512M", "--hugepage-size", "2M")
    assert code == 0, err
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT intel_iommu=on iommu=pt hugepagesz=2M ' \
           'hugepages=1:256"' in out
    assert "softdep mlx5_core pre: vfio-pci" in out
    for bdf in ("0000:81:00.0", "0000:81:00.1"):  # the whole group
        assert f'KERNEL=="{bdf}", ATTR{{driver_override}}="vfio-pci"' in out
    assert "new_id" not in out and "ids=" not in out


def test_host_setup_refuses_the_routed_nic_even_without_iommu(cli, tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root", iommu_units=(), acpi_tables=())
    host.pci("0000:00:03.0", 0x1AF4, 0x1041, driver="virtio-pci", netdevs=("eth0",), virtio=True)
    host.route("eth0", "0.0.0.0", "0.0.0.0", gateway="192.0.2.1")
    code, _, err = cli("host-setup", "--print", "--host-root", str(host.base), "--bdf", "00:03.0")
    assert code == 2 and "probably your SSH connection" in err
    code, out, _ = cli("host-setup", "--print", "--host-root", str(host.base), "--bdf", "00:03.0", "--force")
    assert code == 0 and "softdep virtio_pci pre: vfio-pci" in out and "no IOMMU group yet" in out
