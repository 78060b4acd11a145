"""The domain XML and the placement it comes from, on synthetic hosts: parsed back, element by element."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness import cpus
from vmharness.cli import main as cli
from vmharness.errors import HarnessError
from vmharness.guest import domain, instance, placement, record
from vmharness.guest.domain import DomainSpec, Link, Placement
from vmharness.system.root import HostRoot

NIC = "0000:b3:00.0"


def _spec(**kw: object) -> DomainSpec:
    base: dict[str, object] = dict(
        name="vmh-t", uuid="6d1d6c8e-0000-4000-8000-000000000001", kvm=False, memory_mib=2048,
        placement=Placement(1, (17, 18), (16,)), disk="/v/t/overlay.qcow2", kernel="/i/vmlinuz",
        initrd="/i/initrd.img", cmdline="root=/dev/vda mitigations=off", console_log="/v/t/console.log",
    )
    base.update(kw)
    return DomainSpec(**base)  # type: ignore[arg-type]


def _parse(spec: DomainSpec) -> ET.Element:
    return ET.fromstring(domain.to_xml(spec))


def test_tcg_domain_has_max_cpu_kernel_boot_console_and_agent() -> None:
    dom = _parse(_spec())
    assert dom.get("type") == "qemu"
    assert dom.findtext("name") == "vmh-t"
    assert dom.find("cpu").get("mode") == "maximum"  # type: ignore[union-attr]
    assert dom.find("os/type").get("machine") == "q35"  # type: ignore[union-attr]
    assert dom.findtext("os/kernel") == "/i/vmlinuz"
    assert dom.findtext("os/initrd") == "/i/initrd.img"
    assert dom.findtext("os/cmdline") == "root=/dev/vda mitigations=off"
    assert dom.find("devices/disk/source").get("file") == "/v/t/overlay.qcow2"  # type: ignore[union-attr]
    assert dom.find("devices/disk/driver").get("type") == "qcow2"  # type: ignore[union-attr]
    assert dom.find("devices/serial/log").get("file") == "/v/t/console.log"  # type: ignore[union-attr]
    assert dom.find("devices/channel/target").get("name") == domain.AGENT_CHANNEL  # type: ignore[union-attr]
    assert dom.find("memoryBacking") is None
    assert dom.find("devices/hostdev") is None
    assert {e.tag for e in dom if e.tag.startswith("on_")} == {"on_poweroff", "on_reboot", "on_crash"}
    assert dom.findtext("features/tcg/tb-cache") == str(domain.TCG_CACHE_MIB)  # QEMU's 1 GiB default is too much


def test_kvm_domain_passes_the_host_cpu_through() -> None:
    dom = _parse(_spec(kvm=True))
    assert dom.get("type") == "kvm"
    assert dom.find("cpu").get("mode") == "host-passthrough"  # type: ignore[union-attr]
    assert dom.find("features/tcg") is None


def test_cpu_features_and_raw_qemu_arguments() -> None:
    text = domain.to_xml(_spec(cpu_features=("-md-clear", "+pcid"), qemu_args=("-global", "a.b=c d")))
    dom = ET.fromstring(text)
    assert [(f.get("policy"), f.get("name")) for f in dom.findall("cpu/feature")] == [
        ("disable", "md-clear"), ("require", "pcid")]
    args = dom.findall(f"{{{domain.QEMU_NS}}}commandline/{{{domain.QEMU_NS}}}arg")
    assert [a.get("value") for a in args] == ["-global", "a.b=c d"]
    assert 'xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0"' in text  # the prefix libvirt documents
    plain = _parse(_spec())
    assert plain.find("cpu/feature") is None and len(plain.findall(f"{{{domain.QEMU_NS}}}commandline")) == 0


def test_a_capped_guest_gets_a_cfs_quota_per_vcpu_and_an_uncapped_one_none() -> None:
    capped = _parse(_spec(vcpu_cap=80))
    assert (capped.findtext("cputune/period"), capped.findtext("cputune/quota")) == ("100000", "80000")
    assert len(capped.findall("cputune/vcpupin")) == 2  # pinning stays
    plain = _parse(_spec())
    assert plain.find("cputune/quota") is None and plain.find("cputune/period") is None


def test_pinning_and_numa_follow_the_placement() -> None:
    dom = _parse(_spec())
    assert dom.findtext("vcpu") == "2"
    pins = {p.get("vcpu"): p.get("cpuset") for p in dom.findall("cputune/vcpupin")}
    assert pins == {"0": "17", "1": "18"}
    assert dom.find("cputune/emulatorpin").get("cpuset") == "16"  # type: ignore[union-attr]
    assert dom.find("numatune/memory").get("nodeset") == "1"  # type: ignore[union-attr]
    assert dom.find("numatune/memory").get("mode") == "strict"  # type: ignore[union-attr]
    assert dom.find("numatune/memnode").get("cellid") == "0"  # type: ignore[union-attr]
    cell = dom.find("cpu/numa/cell")
    assert cell is not None and cell.get("cpus") == "0-1" and cell.get("memory") == "2048"


def test_hugepages_and_locked_memory() -> None:
    dom = _parse(_spec(hugepage_kib=1048576))
    page = dom.find("memoryBacking/hugepages/page")
    assert page is not None
    assert (page.get("size"), page.get("unit"), page.get("nodeset")) == ("1048576", "KiB", "0")
    assert dom.find("memoryBacking/locked") is not None


def test_hostdevs_carry_the_address_and_managed_flag() -> None:
    dom = _parse(_spec(hostdevs=(NIC, "0000:b3:00.1"), managed=False))
    devs = dom.findall("devices/hostdev")
    assert [d.get("managed") for d in devs] == ["no", "no"]
    assert all(d.get("mode") == "subsystem" and d.get("type") == "pci" for d in devs)
    addr = devs[1].find("source/address")
    assert addr is not None
    assert (addr.get("domain"), addr.get("bus"), addr.get("slot"), addr.get("function")) == \
        ("0x0000", "0xb3", "0x00", "0x1")
    assert _parse(_spec(hostdevs=(NIC,), managed=True)).find("devices/hostdev").get("managed") == "yes"  # type: ignore[union-attr]


def test_link_is_a_tap_with_virtio() -> None:
    dom = _parse(_spec(link=Link("vmh-t", "52:54:00:01:02:03")))
    iface = dom.find("devices/interface")
    assert iface is not None and iface.get("type") == "ethernet"
    assert iface.find("target").get("dev") == "vmh-t"  # type: ignore[union-attr]
    assert iface.find("mac").get("address") == "52:54:00:01:02:03"  # type: ignore[union-attr]
    assert iface.find("model").get("type") == "virtio"  # type: ignore[union-attr]


def test_values_are_escaped_not_spliced() -> None:
    dom = _parse(_spec(cmdline="a='x' b=\"<y>\" & c"))
    assert dom.findtext("os/cmdline") == "a='x' b=\"<y>\" & c"


def _host(tmp_path: Path, **kw: object) -> FakeHost:
    h = FakeHost(tmp_path / "root", nodes=2, cpus_per_node=16, **kw)  # type: ignore[arg-type]
    h.pci(NIC, driver="vfio-pci", group=40, numa=1)
    h.pci("0000:17:00.0", driver="mlx5_core", group=41, numa=0, netdevs=("ens1",))
    return h


def _free_pages(h: FakeHost, node: int, kib: int, free: int) -> None:
    d = f"sys/devices/system/node/node{node}/hugepages/hugepages-{kib}kB"
    h.write(f"{d}/nr_hugepages", f"{free}\n")
    h.write(f"{d}/free_hugepages", f"{free}\n")


def test_cpulist_parser() -> None:
    assert cpus.parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)


def test_guest_goes_to_the_nics_node(tmp_path: Path) -> None:
    root = HostRoot(_host(tmp_path).base)
    place = placement.place(root, (NIC,), 4)
    assert place.node == 1
    assert place.emulator_cpus == (16,)
    assert place.vcpu_cpus == (17, 18, 19, 20)


def test_without_a_nic_node_0_and_all_its_cpus_when_vcpus_fill_it(tmp_path: Path) -> None:
    root = HostRoot(_host(tmp_path).base)
    place = placement.place(root, (), 16)
    assert place.node == 0 and place.vcpu_cpus == tuple(range(16)) and place.emulator_cpus == tuple(range(16))


def test_more_vcpus_than_the_node_has_is_refused(tmp_path: Path) -> None:
    root = HostRoot(_host(tmp_path).base)
    with pytest.raises(HarnessError, match="17 vCPUs but node 1 has 16 CPUs"):
        placement.place(root, (NIC,), 17)


def test_hugepage_shortfall_is_refused(tmp_path: Path) -> None:
    h = _host(tmp_path)
    _free_pages(h, 1, 2048, 511)
    _free_pages(h, 0, 2048, 4096)  # plenty, but on the wrong node
    root = HostRoot(h.base)
    with pytest.raises(HarnessError, match="needs 512 free 2M hugepages on node 1, there are 511") as err:
        placement.check_hugepages(root, 1, 2048, 1024)
    assert "host-prepare --hugepages 1024M --hugepage-size 2M --node 1" in err.value.hint
    _free_pages(h, 1, 2048, 512)
    placement.check_hugepages(root, 1, 2048, 1024)


def test_a_device_not_on_vfio_is_refused_unless_managed(tmp_path: Path) -> None:
    root = HostRoot(_host(tmp_path).base)
    req = instance.VmRequest(name="t", bdfs=("0000:17:00.0",), image_dir=str(tmp_path / "images"), accel="tcg")
    with pytest.raises(HarnessError, match="bound to mlx5_core, not vfio-pci"):
        instance.plan(root, req, for_print=True)
    planned = instance.plan(root, instance.VmRequest(**{**req.__dict__, "managed": True}), for_print=True)
    assert planned.spec.managed and planned.spec.hostdevs == ("0000:17:00.0",)


def test_under_tcg_the_timer_check_is_skipped_before_the_researchers_words(tmp_path: Path) -> None:
    root = HostRoot(_host(tmp_path).base)
    req = instance.VmRequest(name="t", image_dir=str(tmp_path / "images"), cmdline="mitigations=auto")
    tcg = instance.plan(root, instance.VmRequest(**{**req.__dict__, "accel": "tcg"}), for_print=True)
    kvm = instance.plan(root, instance.VmRequest(**{**req.__dict__, "accel": "kvm"}), for_print=True)
    assert tcg.spec.cmdline.split()[-4:] == ["no_timer_check", "tsc=reliable", "cryptomgr.notests", "mitigations=auto"]
    assert not {"no_timer_check", "tsc=reliable", "cryptomgr.notests"} & set(kvm.spec.cmdline.split())
    assert kvm.spec.cmdline.endswith(" mitigations=auto")


def test_bad_names_are_refused() -> None:
    for bad in ("", "Guest", "1abc", "a" * 12, "a_b"):
        with pytest.raises(HarnessError, match="not allowed"):
            record.check_name(bad)


def test_link_takes_the_first_free_network() -> None:
    import ipaddress

    taken = {ipaddress.IPv4Network("198.18.1.0/24"), ipaddress.IPv4Network("198.18.2.0/25")}
    link, (host, guest) = instance.link_for("demo", taken)
    assert (host, guest) == ("198.18.3.1/24", "198.18.3.2/24")
    assert link.tap == "vmh-demo" and link.mac.startswith("52:54:00:")
    assert instance.link_for("demo", set())[0].mac == link.mac  # stable per name


def test_print_xml_against_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole CLI path without libvirtd: placement and KVM come from the snapshot's own facts."""
    h = _host(tmp_path)
    _free_pages(h, 1, 1048576, 8)
    h.write("vmharness-probes.json", json.dumps({"kvm": {"usable": True, "detail": "probe ran"}}))
    code = cli.main(["vm", "up", "--print-xml", "--host-root", str(h.base), "--name", "t", "--bdf", "b3:00.0",
                     "--hugepages", "--hugepage-size", "1G", "--memory", "8192", "--vcpus", "8",
                     "--image-dir", str(tmp_path / "images"), "--cmdline", "mitigations=auto"])
    out = capsys.readouterr()
    assert code == 0, out.err
    dom = ET.fromstring(out.out)
    assert dom.get("type") == "kvm"
    assert dom.find("devices/hostdev/source/address").get("bus") == "0xb3"  # type: ignore[union-attr]
    assert dom.find("memoryBacking/hugepages/page").get("size") == "1048576"  # type: ignore[union-attr]
    assert [p.get("cpuset") for p in dom.findall("cputune/vcpupin")] == [str(c) for c in range(17, 25)]
    assert dom.find("numatune/memory").get("nodeset") == "1"  # type: ignore[union-attr]
    assert dom.findtext("os/cmdline", "").endswith(" mitigations=auto")
    assert "not built yet" in out.err and "accelerator: KVM" in out.err


def test_vm_up_boots_the_minimal_init_when_asked_and_the_researchers_init_still_wins(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = _host(tmp_path)

    def cmdline(*more: str) -> list[str]:
        code = cli.main(["vm", "up", "--print-xml", "--host-root", str(h.base), "--name", "t", "--no-link",
                         "--image-dir", str(tmp_path / "images"), *more])
        out = capsys.readouterr()
        assert code == 0, out.err
        return ET.fromstring(out.out).findtext("os/cmdline", "").split()

    assert instance.MINIMAL_INIT not in cmdline("--cmdline", "quiet")  # systemd, the image's own boot
    assert cmdline("--init", "minimal", "--cmdline", "quiet")[-2:] == [instance.MINIMAL_INIT, "quiet"]
    assert cmdline("--init", "minimal", "--cmdline", "init=/bin/sh")[-2:] == [instance.MINIMAL_INIT, "init=/bin/sh"]


def test_print_xml_refuses_more_memory_than_the_snapshot_reserved(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    h = _host(tmp_path)
    _free_pages(h, 1, 1048576, 4)
    code = cli.main(["vm", "up", "--print-xml", "--host-root", str(h.base), "--bdf", NIC, "--hugepages",
                     "--hugepage-size", "1G", "--memory", "8192", "--image-dir", str(tmp_path / "images")])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: the guest needs 8 free 1G hugepages on node 1, there are 4" in err
    assert "Traceback" not in err
