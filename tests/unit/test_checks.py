"""host-check against synthetic hosts: which rows pass, fail, and what they tell the user to do."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakehost import FakeHost
from vmharness.host import checks, probes
from vmharness.host.root import HostRoot


def rows(root: Path) -> dict[str, checks.Check]:
    return {c.name: c for c in checks.run_checks(HostRoot(root))}


def test_intel_host_with_iommu_on(host: FakeHost) -> None:
    host.pci("0000:00:00.0", 0x8086, 0x3E30, 0x060000, group=0)
    r = rows(host.base)
    assert r["CPU virtualization"].status == "PASS"
    assert r["IOMMU in firmware"].status == "PASS" and "DMAR" in r["IOMMU in firmware"].detail
    assert r["IOMMU in kernel"].status == "PASS" and "dmar0" in r["IOMMU in kernel"].detail
    assert r["IOMMU on cmdline"].status == "PASS" and "intel_iommu=on" in r["IOMMU on cmdline"].detail
    assert r["interrupt remapping"].status == "PASS"
    assert r["module vfio-pci"].status == "PASS" and "loadable" in r["module vfio-pci"].detail
    assert r["hugetlbfs"].status == "WARN"


def test_firmware_dmar_but_cmdline_lacks_intel_iommu(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet", iommu_units=())
    host.pci("0000:00:00.0", 0x8086, 0x3E30, 0x060000)
    r = rows(host.base)
    assert r["IOMMU in firmware"].status == "PASS"
    kernel = r["IOMMU in kernel"]
    assert kernel.status == "FAIL"
    assert "firmware has an IOMMU but the kernel did not enable it" in kernel.detail
    assert "intel_iommu=on" in kernel.fix
    assert r["IOMMU on cmdline"].status == "FAIL" and "intel_iommu=on" in r["IOMMU on cmdline"].fix


def test_no_iommu_in_firmware_is_told_apart(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, acpi_tables=("APIC",), iommu_units=(), interrupt_remapping=False)
    r = rows(host.base)
    assert r["IOMMU in firmware"].status == "FAIL" and "VT-d" in r["IOMMU in firmware"].fix
    assert "enable the IOMMU in firmware first" in r["IOMMU in kernel"].fix
    assert r["interrupt remapping"].status == "FAIL"


def test_amd_host_iommu_on_by_default(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, vendor="AuthenticAMD", flags="fpu svm", cmdline="root=/dev/nvme0n1p2 iommu=pt",
                    acpi_tables=("IVRS",), iommu_units=("ivhd0",))
    host.pci("0000:00:00.2", 0x1022, 0x1481, 0x080600, group=1)
    r = rows(host.base)
    assert r["CPU virtualization"].detail.startswith("svm")
    assert "IVRS (AMD-Vi)" in r["IOMMU in firmware"].detail
    assert r["IOMMU on cmdline"].status == "PASS" and "iommu=pt" in r["IOMMU on cmdline"].detail


def test_cmdline_turning_iommu_off(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, cmdline="root=/dev/sda1 intel_iommu=on intel_iommu=off", iommu_units=())
    r = rows(host.base)
    assert r["IOMMU on cmdline"].status == "FAIL" and "intel_iommu=off" in r["IOMMU on cmdline"].detail


def test_interrupt_remapping_off_and_unsafe_override(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, interrupt_remapping=False)
    assert rows(host.base)["interrupt remapping"].status == "FAIL"
    host.write("sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts", "Y\n")
    assert rows(host.base)["interrupt remapping"].status == "WARN"


def test_modules_loaded_builtin_missing(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write("sys/module/vfio_pci/initstate", "live\n")
    host.write(f"lib/modules/{host.release}/modules.dep", "kernel/net/foo.ko: \n")
    host.write(f"lib/modules/{host.release}/modules.builtin", "kernel/drivers/vfio/vfio_iommu_type1.ko\n")
    r = rows(host.base)
    assert r["module vfio-pci"].detail == "loaded"
    assert r["module vfio_iommu_type1"].detail == "built into the kernel"
    (host.base / f"lib/modules/{host.release}/modules.builtin").write_text("")
    r = rows(host.base)
    assert r["module vfio_iommu_type1"].status == "FAIL"


def test_hugepages_per_node_and_mounts(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, nodes=2)
    d = "sys/devices/system/node/node1/hugepages/hugepages-1048576kB"
    host.write(f"{d}/nr_hugepages", "8\n")
    host.write(f"{d}/free_hugepages", "6\n")
    host.mount("hugetlbfs /dev/hugepages1G hugetlbfs rw,relatime,pagesize=1024M 0 0")
    host.mount("hugetlbfs /dev/hugepages hugetlbfs rw,relatime 0 0")
    r = rows(host.base)
    assert "1G: node0 0/0 free, node1 6/8 free" in r["hugepages"].detail
    assert r["hugetlbfs"].detail == "/dev/hugepages1G (pagesize 1G), /dev/hugepages (pagesize 2M)"


def test_live_only_checks_skip_without_recorded_probes(host: FakeHost) -> None:
    r = rows(host.base)
    for name in ("KVM usable", "libvirtd", "QEMU"):
        assert r[name].status == "SKIP", name


def test_live_only_checks_read_from_snapshot_probes(host: FakeHost) -> None:
    host.write(probes.PROBES_FILE, json.dumps({
        "kvm": {"usable": False, "detail": "the probe guest did not finish within 5 s"},
        "libvirtd": {"reachable": True, "detail": "accepting connections on /run/libvirt/libvirt-sock"},
        "qemu": {"path": "/usr/bin/qemu-system-x86_64", "version": "7.2.19"},
    }))
    r = rows(host.base)
    assert r["KVM usable"].status == "FAIL" and "did not finish" in r["KVM usable"].detail
    assert r["libvirtd"].status == "PASS"
    assert r["QEMU"].detail.startswith("7.2.19")


def test_exit_code_and_json(cli, host: FakeHost) -> None:
    host.pci("0000:00:00.0", 0x8086, 0x3E30, 0x060000, group=0)
    data = cli.json("host-check", "--host-root", str(host.base))
    assert data["_exit"] == 0 and data["ok"] is True
    assert {c["status"] for c in data["checks"]} <= {"PASS", "WARN", "SKIP"}
    (host.base / "sys/firmware/acpi/tables/DMAR").unlink()
    data = cli.json("host-check", "--host-root", str(host.base))
    assert data["_exit"] == 1 and data["ok"] is False


def test_iommu_vendor_comes_from_the_firmware_table(tmp_path: Path) -> None:
    # a TCG guest: AMD CPU model, emulated Intel IOMMU, cmdline without intel_iommu=on
    host = FakeHost(tmp_path, vendor="AuthenticAMD", flags="svm", cmdline="root=/dev/vda", iommu_units=())
    r = rows(host.base)
    assert r["IOMMU on cmdline"].status == "FAIL" and "intel_iommu=on" in r["IOMMU on cmdline"].detail
    assert "intel_iommu=on" in r["IOMMU in kernel"].fix
