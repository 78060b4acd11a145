"""The researcher's two commands on synthetic hosts: `host-prepare --bdf X` journals what it took, and
`run` with no --bdf takes exactly that (said on its first line), or says it uses virtio and why; the
wire's addresses come from flags or keys, and errors name whichever was typed; `run --print-xml` on a
host not yet prepared (or a snapshot of another machine) shows the host plan and the domains it would
define, and changes nothing."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.cli import main as cli
from vmharness.errors import HarnessError
from vmharness.experiment import hostprep, runfolder, wire_check
from vmharness.guest import instance
from vmharness.journal import journal
from vmharness.model import config, sections, wire
from vmharness.system.root import HostRoot

MLX, CX5 = 0x15B3, 0x1017
NIC, SIBLING, OTHER = "0000:b3:00.0", "0000:b3:00.1", "0000:17:00.0"
PAGES = "sys/devices/system/node/node{node}/hugepages/hugepages-{kib}kB"


def _host(tmp_path: Path, driver: str = "mlx5_core") -> FakeHost:
    """Two nodes of four CPUs; a dual-port mlx5 NIC on node 1 (one IOMMU group), another NIC on node 0."""
    h = FakeHost(tmp_path / "root", nodes=2, cpus_per_node=4)
    h.pci(NIC, MLX, CX5, driver=driver, group=40, numa=1, netdevs=() if driver == "vfio-pci" else ("ens1f0",))
    h.pci(SIBLING, MLX, CX5, driver=driver, group=40, numa=1, netdevs=() if driver == "vfio-pci" else ("ens1f1",))
    h.pci(OTHER, 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
    h.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    return h


def _pages(h: FakeHost, node: int, kib: int, total: int, free: int) -> None:
    d = PAGES.format(node=node, kib=kib)
    h.write(f"{d}/nr_hugepages", f"{total}\n")
    h.write(f"{d}/free_hugepages", f"{free}\n")


def _prepared_by_host_prepare(h: FakeHost, pages: int = 4096) -> HostRoot:
    """The journal host-prepare leaves after `--bdf NIC --hugepages 8G` (its group's sibling came along)."""
    root = HostRoot(h.base, allow_writes=True)
    for bdf, named in ((NIC, True), (SIBLING, False)):
        journal.record(root, {"op": "bind", "bdf": bdf, "driver": "mlx5_core", "override": None, "netdevs": [],
                              "named": named}, "host-prepare")
    journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0}, "host-prepare")
    journal.record(root, {"op": "mount", "path": "/run/vmharness/hugepages-2M", "created": True}, "host-prepare")
    _pages(h, 1, 2048, pages, pages)
    h.mount("vmharness /run/vmharness/hugepages-2M hugetlbfs rw,relatime,pagesize=2M 0 0")
    return HostRoot(h.base)


def _tree(base: Path) -> dict[str, str]:
    """Every file's content hash, every link's target and every folder, with their modes."""
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(base):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(base))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = f"dir {path.stat().st_mode:o}"
            else:
                out[rel] = f"{path.stat().st_mode:o} " + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _cfg(**guest: object) -> sections.RunConfig:
    cfg = config.load_run(None)
    return sections.RunConfig(**{**vars(cfg), "guest": sections.GuestSection(**{**vars(cfg.guest), **guest})})


# 1. one record of the prepared host ---------------------------------------------------------------
def test_a_run_with_no_nic_takes_what_host_prepare_set_up_and_says_so_first(tmp_path: Path) -> None:
    h = _host(tmp_path, driver="vfio-pci")
    root = _prepared_by_host_prepare(h)
    choice = hostprep.choose(root, _cfg(), hostprep.Given())
    assert choice.line.startswith("using what host-prepare set up: 0000:b3:00.0 (vfio-pci, group 40, node 1), "
                                  "4096 \u00d7 2 MiB hugepages on node 1")
    g = choice.cfg.guest
    assert g.bdf == (NIC,), "the sibling that only came along with the group is not passed through"
    assert (g.hugepages, g.hugepage_size) == (True, "2M")
    assert (g.address, g.client_address) == (wire.DEFAULT_ADDRESS, wire.DEFAULT_CLIENT_ADDRESS)
    assert choice.source == "host-prepare" and choice.to_json()["bdf"] == [NIC]


def test_the_run_takes_nothing_from_host_prepare_when_given_a_nic(tmp_path: Path) -> None:
    h = _host(tmp_path, driver="vfio-pci")
    root = _prepared_by_host_prepare(h)
    choice = hostprep.choose(root, _cfg(bdf=(SIBLING,)), hostprep.Given(bdf=True))
    assert choice.line.startswith("passing through 0000:b3:00.1 (vfio-pci, group 40, node 1) (--bdf)")
    assert choice.cfg.guest.bdf == (SIBLING,) and choice.cfg.guest.hugepages is False


def test_a_run_with_nothing_prepared_says_it_uses_virtio_and_why(tmp_path: Path) -> None:
    choice = hostprep.choose(HostRoot(_host(tmp_path).base), _cfg(), hostprep.Given())
    assert choice.line == ("no NIC passed through: host-prepare has none and no --bdf was given; wrk reaches the "
                           "guest over virtio")
    assert choice.cfg.guest.bdf == () and choice.cfg.guest.address == "" and choice.source == "virtio"


def test_a_resumed_run_never_takes_a_nic_it_did_not_start_with(tmp_path: Path) -> None:
    h = _host(tmp_path, driver="vfio-pci")
    root = _prepared_by_host_prepare(h)
    choice = hostprep.choose(root, _cfg(), hostprep.Given(resumed=True))
    assert choice.cfg.guest.bdf == () and "none in the run's configuration" in choice.line


def test_a_prepared_nic_back_on_its_driver_is_an_error_with_the_fix(tmp_path: Path) -> None:
    h = _host(tmp_path)  # on mlx5_core, though the journal says host-prepare moved it
    root = _prepared_by_host_prepare(h)
    with pytest.raises(HarnessError) as err:
        hostprep.choose(root, _cfg(), hostprep.Given())
    assert err.value.message == "host-prepare moved 0000:b3:00.0 to vfio-pci, but it is bound to mlx5_core now"
    assert err.value.hint.startswith("give it back and prepare again: vmharness host-restore, then vmharness "
                                     "host-prepare --bdf 0000:b3:00.0")


def test_what_a_run_holds_is_not_host_prepares(tmp_path: Path) -> None:
    h = _host(tmp_path, driver="vfio-pci")
    root = HostRoot(h.base, allow_writes=True)
    journal.record(root, {"op": "bind", "bdf": NIC, "driver": "mlx5_core", "override": None, "netdevs": [],
                          "named": True}, "run:0000000001")
    assert hostprep.prepared(root) == hostprep.Prepared()


def test_hugepages_host_prepare_reserved_alone_back_a_virtio_guest_on_their_node(tmp_path: Path) -> None:
    h = _host(tmp_path)
    root = HostRoot(h.base, allow_writes=True)
    journal.record(root, {"op": "pages", "node": 0, "size_kib": 1048576, "before": 0}, "host-prepare")
    _pages(h, 0, 1048576, 4, 4)
    choice = hostprep.choose(root, _cfg(), hostprep.Given())
    assert choice.line.endswith("over virtio; guest memory on host-prepare's 4 \u00d7 1 GiB hugepages on node 0")
    assert (choice.cfg.guest.hugepages, choice.cfg.guest.hugepage_size) == (True, "1G")


def test_run_print_xml_on_a_host_host_prepare_set_up_uses_its_nic_and_pages(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = _host(tmp_path, driver="vfio-pci")
    _prepared_by_host_prepare(h)
    code = cli.main(["run", "--print-xml", "--host-root", str(h.base)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.err.splitlines()[0].startswith("  using what host-prepare set up: 0000:b3:00.0 (vfio-pci")
    assert "nothing to change: the host is already prepared" in out.out
    assert out.out.count("<domain ") == 5 and out.out.count("<hostdev ") == 5  # the study's and the control


# 2. the wire's addresses --------------------------------------------------------------------------
def test_one_address_given_the_other_is_the_first_free_host_of_its_network() -> None:
    names = ("--address", "--client-address")
    assert wire.wire("", "", names) == ("198.19.0.2/24", "198.19.0.1/24")
    assert wire.wire("10.9.0.1/24", "", names) == ("10.9.0.1/24", "10.9.0.2/24")
    assert wire.wire("", "198.18.7.5/30", names) == ("198.18.7.6/30", "198.18.7.5/30")
    for default in (wire.DEFAULT_ADDRESS, wire.DEFAULT_CLIENT_ADDRESS):
        net = ipaddress.IPv4Interface(default).network
        assert net.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")) and not net.overlaps(instance.LINK_RANGE)


@pytest.mark.parametrize(("argv", "toml", "message"), [
    (["--address", "198.19.0.2"], "", "--address '198.19.0.2' is not an IPv4 address with a prefix length"),
    (["--address", ""], "", "--address is empty"),
    (["--client-address", "a b;$(touch /tmp/vmh-x)"], "", "--client-address 'a b;$(touch /tmp/vmh-x)' is not"),
    (["--address", "198.19.0.2/24", "--client-address", "198.19.1.1/24"], "",
     "--address 198.19.0.2/24 and --client-address 198.19.1.1/24 are not on one network"),
    (["--address", "198.19.0.2/24"], 'client_address = "198.19.1.1/24"\n',
     "--address 198.19.0.2/24 and guest.client_address 198.19.1.1/24 are not on one network"),
    ([], 'address = "198.19.0.2/24"\nclient_address = "198.19.0.2/24"\n',
     "guest.address and guest.client_address are both 198.19.0.2"),
    ([], 'address = "198.19.0.2"\n', "config.guest.address '198.19.0.2' is not an IPv4 address"),
])
def test_a_bad_address_names_the_flag_or_the_key_that_was_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], toml: str, message: str) -> None:
    h = _host(tmp_path)
    conf = tmp_path / "r.toml"
    conf.write_text(f"[guest]\nbdf = [\"{NIC}\"]\n{toml}")
    code = cli.main(["run", str(conf), "--print-xml", "--host-root", str(h.base), *argv])
    err = capsys.readouterr().err
    assert code == 2 and f"error: {message}" in err, err
    assert "Traceback" not in err and "fix the configuration file" not in err


def test_an_address_with_no_nic_passed_through_is_refused_by_its_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--print-xml", "--host-root", str(_host(tmp_path).base), "--address", "198.19.0.2/24"])
    err = capsys.readouterr().err
    assert code == 2 and "error: --address is an address on a passed-through NIC, and no NIC is passed" in err


def test_the_wire_addresses_go_into_the_manifest(tmp_path: Path) -> None:
    h = _host(tmp_path, driver="vfio-pci")
    cfg = _cfg(bdf=(NIC,), address="198.18.0.2/24")
    choice = hostprep.choose(HostRoot(h.base), cfg, hostprep.Given(bdf=True, address=True))
    run = runfolder.new_run(choice.cfg, tmp_path / "run", choice.to_json())
    assert run.manifest["config"]["guest"]["address"] == "198.18.0.2/24"
    assert run.manifest["config"]["guest"]["client_address"] == "198.18.0.1/24"
    assert run.manifest["nic"]["source"] == "--bdf" and run.manifest["nic"]["said"] == choice.line


IP_ADDR = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
3: ens2f0    inet 198.19.0.1/24 brd 198.19.0.255 scope global ens2f0\\       valid_lft forever
"""


def test_the_client_address_is_found_on_the_client_that_holds_it() -> None:
    assert wire_check.holder("198.19.0.1/24", {"local": "", "loadgen": IP_ADDR}) == ("loadgen", "ens2f0")
    assert wire_check.holder("198.19.0.9/24", {"local": IP_ADDR}) is None
    assert wire_check.holder("127.0.0.1/8", {"local": "garbage\n\n1: x"}) is None


# 3. preflight -------------------------------------------------------------------------------------
def test_print_xml_on_an_unprepared_snapshot_shows_the_plan_and_the_domain_and_changes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = _host(tmp_path)  # the NIC is still on mlx5_core: nothing is prepared
    before = _tree(h.base)
    code = cli.main(["run", "--print-xml", "--bdf", NIC, "--hugepages", "--host-root", str(h.base)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.err.splitlines()[0] == ("  passing through 0000:b3:00.0 (mlx5_core, group 40, node 1) (--bdf), guest "
                                       "memory on 2M hugepages of its node; the guest is 198.19.0.2/24 on it, the "
                                       "clients 198.19.0.1/24")
    plan = out.out.split("<!--", 1)[0]
    assert plan.startswith("host-prepare plan (dry run: nothing is changed)")
    assert "0000:b3:00.0  mlx5_core -> vfio-pci  (asked for; netdev ens1f0" in plan
    assert "0000:b3:00.1  mlx5_core -> vfio-pci  (same IOMMU group: comes along" in plan
    assert "hugepages: node 1, 2M pages 0 -> 512; 512 free for the guest (1024 MiB)" in plan
    domains = [ET.fromstring(part.split("-->", 1)[1]) for part in out.out.split("<!--")[1:]]
    assert len(domains) == 5  # the study's four instances and the control
    for dom in domains:
        (hostdev,) = dom.findall("devices/hostdev")
        assert hostdev.find("source/address").get("bus") == "0xb3"  # type: ignore[union-attr]
        assert dom.find("memoryBacking/hugepages/page").get("size") == "2048"  # type: ignore[union-attr]
        assert dom.find("numatune/memory").get("nodeset") == "1"  # type: ignore[union-attr]
        assert [p.get("cpuset") for p in dom.findall("cputune/vcpupin")] == ["5"]  # node 1's CPUs are 4-7
    assert _tree(h.base) == before


def test_print_xml_still_refuses_what_host_prepare_would_refuse(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = _host(tmp_path)
    before = _tree(h.base)
    code = cli.main(["run", "--print-xml", "--bdf", OTHER, "--host-root", str(h.base)])
    err = capsys.readouterr().err
    assert code == 2 and "error: 0000:17:00.0 (eth0) holds" in err and "--force" not in err.split("error:")[0]
    assert _tree(h.base) == before


def test_print_xml_with_no_nic_says_there_is_nothing_to_prepare(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--print-xml", "--host-root", str(_host(tmp_path).base)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out.startswith("host-prepare plan: nothing to prepare")
    assert "<hostdev" not in out.out and "over virtio" in out.err.splitlines()[0]


def _stable(text: str) -> str:
    """A preflight's output without what each call makes up: the domain's UUID, the run's id and the
    link's MAC (made from that id)."""
    text = re.sub(r"52:54:00(:[0-9a-f]{2}){3}", "MAC", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", text)
    return re.sub(r"(run:|vmh-r|\"r)[0-9a-f]{8,}", r"\1ID", text)


def test_print_xml_on_a_host_snapshot_answers_as_on_the_host_it_was_taken_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = _host(tmp_path)
    tarball = tmp_path / "snap.tar.gz"
    assert cli.main(["host-snapshot", "--host-root", str(h.base), str(tarball)]) == 0
    snap = tmp_path / "snap"
    snap.mkdir()
    with tarfile.open(tarball) as t:
        t.extractall(snap, filter="tar")
    capsys.readouterr()
    argv = ["run", "--print-xml", "--bdf", NIC, "--hugepages", "--host-root"]
    outputs = []
    for tree in (h.base, snap):
        code = cli.main([*argv, str(tree)])
        out = capsys.readouterr()
        assert code == 0, out.err
        outputs.append(_stable(out.out))
    assert outputs[0] == outputs[1] and "<hostdev " in outputs[1]
