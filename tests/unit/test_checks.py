"""host-check against synthetic hosts: which rows pass, fail, and what they tell the user to do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.host.inspect import hugepages, probes
from vmharness.host.inspect.hostcheck.facts import Check, Facts
from vmharness.host.inspect.hostcheck.memory import hugeadm_pools
from vmharness.host.inspect.hostcheck.rows import run_checks
from vmharness.system.root import HostRoot


def rows(root: Path) -> dict[str, Check]:
    return {c.name: c for c in run_checks(HostRoot(root))}


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
    assert (r["hugeadm pools"].status, r["hugeadm pools"].detail) == ("SKIP", "not run on a host root")


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
    # A host tree with no probes: what only the live host can answer is SKIP, and no hugetlbfs is mounted.
    expected = {name: "PASS" for name in ("CPU virtualization", "/dev/kvm", "IOMMU in firmware", "IOMMU in kernel",
                                          "IOMMU on cmdline", "interrupt remapping", "module vfio-pci",
                                          "module vfio_iommu_type1", "hugepages")}
    expected |= {"hugetlbfs": "WARN", "KVM usable": "SKIP", "hugeadm pools": "SKIP", "libvirtd": "SKIP", "QEMU": "SKIP"}
    assert {c["name"]: c["status"] for c in data["checks"]} == expected
    (host.base / "sys/firmware/acpi/tables/DMAR").unlink()
    data = cli.json("host-check", "--host-root", str(host.base))
    assert data["_exit"] == 1 and data["ok"] is False
    assert {c["name"]: c["status"] for c in data["checks"]} == {**expected, "IOMMU in firmware": "FAIL"}


def test_iommu_vendor_comes_from_the_firmware_table(tmp_path: Path) -> None:
    # a TCG guest: AMD CPU model, emulated Intel IOMMU, cmdline without intel_iommu=on
    host = FakeHost(tmp_path, vendor="AuthenticAMD", flags="svm", cmdline="root=/dev/vda", iommu_units=())
    r = rows(host.base)
    assert r["IOMMU on cmdline"].status == "FAIL" and "intel_iommu=on" in r["IOMMU on cmdline"].detail
    assert "intel_iommu=on" in r["IOMMU in kernel"].fix


# --- libhugetlbfs' view: hugeadm --pool-list, on the live host only ---------------------------------
POOL_LIST = ("      Size  Minimum  Current  Maximum  Default\n"
             "   2097152        0        0        0        *\n"
             "1073741824        2        2        4         \n")  # as libhugetlbfs 2.23 prints it, trailing blanks too


def live_facts() -> Facts:
    """What host-check knows on the live host, with hugeadm run now (the other probes left out)."""
    return Facts(HostRoot("/"), frozenset(), None, [], [], 0, {"hugeadm": probes.hugeadm()})


def fake_hugeadm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """A hugeadm found first on PATH: a shell script with `body`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "hugeadm"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")  # first, before any real one


def test_hugeadm_pools_are_reported_on_the_live_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_hugeadm(tmp_path, monkeypatch, f"[ \"$1\" = --pool-list ] || exit 3\ncat <<'END'\n{POOL_LIST}END")
    c = hugeadm_pools(live_facts())
    assert (c.status, c.detail) == ("PASS", "2M (default): minimum 0, current 0, maximum 0; "
                                            "1G: minimum 2, current 2, maximum 4")


def test_without_hugeadm_the_row_is_skipped_with_the_install_hint(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    c = hugeadm_pools(live_facts())
    assert c.status == "SKIP" and "not installed" in c.detail and "libhugetlbfs-bin" in c.fix


@pytest.mark.parametrize(("body", "said"), [
    ("echo 'hugeadm:ERROR: No hugetlbfs support' >&2; exit 1", "failed (exit 1): hugeadm:ERROR: No hugetlbfs"),
    ("kill -9 $$", "killed by SIGKILL"),
    ("exec sleep 30", "did not finish within 0.5 s"),
    ("echo 'Size Minimum'", "line 1 is not the header"),
    ("printf 'Size Minimum Current Maximum Default\\n2097152 0 x 0\\n'", "line 2 is not 'SIZE MINIMUM"),
    ("printf 'Size Minimum Current Maximum Default\\n2097152 0 0 0 * *\\n'", "line 2 is not"),
    ("printf 'Size Minimum Current Maximum Default\\n999 0 0 0\\n'", "999 is not a page size"),
    ("printf 'Size Minimum Current Maximum Default\\n%030d 0 0 0\\n' 1", "line 2 is not"),
    ("head -c 3000 /dev/urandom", "printed something unexpected"),
])
def test_a_failing_hanging_or_garbled_hugeadm_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           body: str, said: str) -> None:
    fake_hugeadm(tmp_path, monkeypatch, body)
    if body.startswith("exec sleep"):  # only the hanging one is cut short; the others keep the 10 s a
        monkeypatch.setattr(probes, "HUGEADM_TIMEOUT", 0.5)  # loaded machine may need to start a shell
    c = hugeadm_pools(live_facts())
    assert c.status == "WARN" and said in c.detail, c.detail


def test_a_header_alone_lists_no_page_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_hugeadm(tmp_path, monkeypatch, "echo '      Size  Minimum  Current  Maximum  Default'")
    assert hugeadm_pools(live_facts()).detail == "hugeadm lists no page sizes"


def test_a_snapshot_shows_the_pools_hugeadm_printed_when_it_was_taken(host: FakeHost) -> None:
    host.write(probes.PROBES_FILE, json.dumps({"hugeadm": {"installed": True, "pool_list": POOL_LIST}}))
    assert rows(host.base)["hugeadm pools"].detail.startswith("2M (default): minimum 0")
    host.write(probes.PROBES_FILE, json.dumps({"hugeadm": {"installed": False}}))
    assert rows(host.base)["hugeadm pools"].status == "SKIP"
    host.write(probes.PROBES_FILE, json.dumps({"hugeadm": "x"}))
    assert rows(host.base)["hugeadm pools"].detail == "not run on a host root"


@pytest.mark.skipif(shutil.which("hugeadm") is None, reason="libhugetlbfs-bin is not installed")
def test_the_real_hugeadm_sees_the_page_sizes_sysfs_has() -> None:
    c = hugeadm_pools(live_facts())
    assert c.status == "PASS", c.detail
    labels = [part.split(":")[0].removesuffix(" (default)") for part in c.detail.split("; ")]
    assert labels == [hugepages.size_label(k) for k in hugepages.sizes(HostRoot("/"))]
