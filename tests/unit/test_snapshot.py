"""host-snapshot of a synthetic host: small, symlinks relative, and it answers exactly as the original —
host-check and host-groups, a tuning plan, a run's preflight — and a damaged snapshot is one line."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from tests import forked_cli
from tests.fakehost import FakeHost
from tests.snapshot_compare import normalise
from tests.unit.test_cli_errors import assert_one_line_error
from vmharness.journal import files, journal, restore
from vmharness.system.root import HostRoot


def build(host: FakeHost) -> None:
    host.pci("0000:00:1c.0", 0x8086, 0xA110, 0x060400, driver="pcieport", group=7)
    host.pci("0000:b3:00.0", 0x15B3, 0x1019, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f0",),
             parent="0000:00:1c.0")
    host.pci("0000:b3:00.1", 0x15B3, 0x1019, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f1",),
             parent="0000:00:1c.0")
    host.pci("0000:00:03.0", 0x1AF4, 0x1041, driver="virtio-pci", netdevs=("eth0",), virtio=True)
    host.virtual_netdev("bond0")
    host.enslave("ens1f0", "bond0")
    host.address("bond0", "10.0.0.2", 24)
    host.route("bond0", "0.0.0.0", "0.0.0.0", gateway="10.0.0.1")
    host.write("sys/devices/pci0000:00/0000:00:1c.0/0000:b3:00.0/net/ens1f0/address", "b8:ce:f6:00:00:01\n")


def unpack(tarball: Path, dest: Path) -> Path:
    dest.mkdir()
    with tarfile.open(tarball) as t:
        t.extractall(dest, filter="tar")
    return dest


def test_round_trip_gives_identical_json(cli, host: FakeHost, tmp_path: Path) -> None:
    build(host)
    out = tmp_path / "snap.tar.gz"
    code, msg, _ = cli("host-snapshot", "--host-root", str(host.base), str(out))
    assert code == 0 and "wrote" in msg
    snap = unpack(out, tmp_path / "snap")
    for cmd in (["host-groups"], ["host-check"], ["host-groups", "--class", "network"]):
        original = cli.json(*cmd, "--host-root", str(host.base))
        copy = cli.json(*cmd, "--host-root", str(snap))
        assert copy == original, cmd
    assert cli.json("host-groups", "--host-root", str(snap))["groups"][1]["devices"][0]["active"] == {
        "ens1f0": "ens1f0 → bond0 holds route 10.0.0.0/24, default route, address 10.0.0.2"}


def test_snapshot_is_small_relative_and_keeps_no_mac(cli, host: FakeHost, tmp_path: Path) -> None:
    build(host)
    out = tmp_path / "snap.tar.gz"
    cli("host-snapshot", "--host-root", str(host.base), str(out))
    with tarfile.open(out) as t:
        members = t.getmembers()
    links = [m for m in members if m.issym()]
    assert links and all(not m.linkname.startswith("/") for m in links)
    assert not any(m.name.endswith("/address") for m in members), "MAC addresses stay behind"
    assert out.stat().st_size < 64 * 1024


def test_snapshot_is_deterministic(cli, host: FakeHost, tmp_path: Path) -> None:
    build(host)
    a, b = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    cli("host-snapshot", "--host-root", str(host.base), str(a))
    cli("host-snapshot", "--host-root", str(host.base), str(b))
    assert a.read_bytes() == b.read_bytes()


def test_unwritable_output(cli, host: FakeHost, tmp_path: Path) -> None:
    code, _, err = cli("host-snapshot", "--host-root", str(host.base), str(tmp_path / "no" / "x.tar.gz"))
    assert code == 2 and err.startswith("error: cannot write")


NIC_DIR = "sys/devices/pci0000:00/0000:00:1c.0/0000:b3:00.0"
SYSCTLS = {"net/core/somaxconn": "4096", "net/core/netdev_max_backlog": "1000", "net/core/rps_sock_flow_entries": "0",
           "net/ipv4/tcp_max_syn_backlog": "512", "net/ipv4/ip_local_port_range": "32768\t60999",
           "net/ipv4/tcp_tw_reuse": "2", "fs/file-max": "9223372036854775807", "vm/swappiness": "60"}


def tunable(host: FakeHost) -> None:
    """What a tuning plan reads on a host, laid out as the kernel does: ens1f0's device link, uevent,
    two RX queues and three MSI vectors (two queues, one async) with their affinities; the sysctls,
    THP, KSM, the clocksource, and a governor behind cpufreq's link to its policy."""
    host.link(f"{NIC_DIR}/net/ens1f0/device", NIC_DIR)
    host.write(f"{NIC_DIR}/uevent", "DRIVER=mlx5_core\nPCI_SLOT_NAME=0000:b3:00.0\n")
    host.write(f"{NIC_DIR}/net/ens1f0/ifindex", "4\n")
    for q in ("rx-0", "rx-1", "tx-0"):
        host.write(f"{NIC_DIR}/net/ens1f0/queues/{q}/{'rps_cpus' if q[0] == 'r' else 'xps_cpus'}", "0\n")
        if q[0] == "r":
            host.write(f"{NIC_DIR}/net/ens1f0/queues/{q}/rps_flow_cnt", "0\n")
    lines = ["           CPU0       CPU1"]
    for irq, label in ((40, "mlx5_async0@pci:0000:b3:00.0"), (41, "mlx5_comp0@pci:0000:b3:00.0"),
                       (42, "mlx5_comp1@pci:0000:b3:00.0")):
        host.write(f"{NIC_DIR}/msi_irqs/{irq}", "msix\n")
        host.write(f"proc/irq/{irq}/smp_affinity", "3\n")
        host.write(f"proc/irq/{irq}/smp_affinity_list", "0-1\n")
        lines.append(f" {irq}:  10  0  IR-PCI-MSIX-0000:b3:00.0 {irq}-edge  {label}")
    host.write("proc/interrupts", "\n".join(lines) + "\n")
    for name, value in SYSCTLS.items():
        host.write(f"proc/sys/{name}", value + "\n")
    host.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    host.write("sys/kernel/mm/ksm/run", "1\n")
    clock = "sys/devices/system/clocksource/clocksource0"
    host.write(f"{clock}/available_clocksource", "tsc hpet acpi_pm\n")
    host.write(f"{clock}/current_clocksource", "hpet\n")
    host.write("sys/devices/system/cpu/possible", "0-1\n")
    for cpu in (0, 1):
        host.write(f"sys/devices/system/cpu/cpufreq/policy{cpu}/scaling_governor", "powersave\n")
        host.link(f"sys/devices/system/cpu/cpu{cpu}/cpufreq", f"sys/devices/system/cpu/cpufreq/policy{cpu}")


@pytest.fixture
def tuned_host(tmp_path: Path) -> FakeHost:
    """The synthetic host of `build` with two CPUs (RPS needs one beside the interrupt's) and `tunable`."""
    host = FakeHost(tmp_path / "root", cpus_per_node=2)
    build(host)
    tunable(host)
    return host


def snapshot_of(cli, host: FakeHost, tmp_path: Path) -> Path:
    out = tmp_path / "snap.tar.gz"
    code, _, err = cli("host-snapshot", "--host-root", str(host.base), str(out))
    assert code == 0, err
    return unpack(out, tmp_path / "snap")


def test_a_tuning_plan_on_the_snapshot_is_the_plan_on_the_host(cli, tuned_host: FakeHost, tmp_path: Path) -> None:
    host = tuned_host
    snap = snapshot_of(cli, host, tmp_path)
    argv = ("tune", "plan", "--profile", "seeds", "--iface", "ens1f0")
    original = cli.json(*argv, "--host-root", str(host.base))
    assert cli.json(*argv, "--host-root", str(snap)) == original
    changed = {c["knob"] for c in original["changes"]}
    assert changed >= {"irq_affinity", "rps", "rfs", "sysctl", "clocksource", "governor", "thp", "ksm"}, original
    assert [c["path"] for c in original["changes"] if c["knob"] == "irq_affinity"] == [
        "/proc/irq/41/smp_affinity", "/proc/irq/42/smp_affinity"], "queue vectors only, not the async one"
    assert cli.json("tune", "plan", "--host-root", str(snap)) == cli.json("tune", "plan", "--host-root", str(host.base))


def test_root_only_sysctls_and_write_only_files_stay_behind(cli, tuned_host: FakeHost, tmp_path: Path) -> None:
    host = tuned_host
    host.write("proc/sys/net/ipv4/tcp_fastopen_key", "00000000-00000000-00000000-00000000\n")
    os.chmod(host.base / "proc/sys/net/ipv4/tcp_fastopen_key", 0o600)
    host.write("proc/sys/vm/drop_caches", "")
    os.chmod(host.base / "proc/sys/vm/drop_caches", 0o200)
    snap = snapshot_of(cli, host, tmp_path)
    assert (snap / "proc/sys/net/core/somaxconn").read_text() == "4096\n"
    assert not (snap / "proc/sys/net/ipv4/tcp_fastopen_key").exists(), "a secret the kernel keeps root-only"
    assert not (snap / "proc/sys/vm/drop_caches").exists()
    assert (snap / "sys/devices/system/cpu/cpu0/cpufreq").is_symlink(), "kept as the kernel links it"


def test_the_snapshot_keeps_of_the_journal_only_bindings_and_hugepages(cli, host: FakeHost, tmp_path: Path) -> None:
    host.pci("0000:b3:00.0", 0x15B3, 0x1019, driver="vfio-pci", group=40, numa=1)
    host.pci("0000:00:02.0", 0x8086, 0x10D3, driver="e1000e", group=1, netdevs=("eth0",))
    host.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    host.finish()
    writer = HostRoot(host.base, allow_writes=True)
    assert {"bind", "file"} <= set(journal.OPS), (restore, files)  # registered where they are undone
    journal.record(writer, {"op": "bind", "bdf": "0000:b3:00.0", "driver": "mlx5_core", "override": None,
                            "netdevs": [], "named": True}, "host-prepare")
    journal.record(writer, {"op": "file", "path": "/tmp/vmharness-secret-name", "ssh": None}, "run:0123456789")
    snap = snapshot_of(cli, host, tmp_path)
    kept = [json.loads(line) for line in (snap / "run/vmharness/journal.jsonl").read_text().splitlines()]
    assert [r["op"] for r in kept] == ["bind"]
    for argv in (["run", "--print-xml"], ["host-prepare", "--dry-run", "--bdf", "b3:00.0", "--json"]):
        here = cli(*argv, "--host-root", str(host.base))
        there = cli(*argv, "--host-root", str(snap))
        assert there[0] == here[0] == 0, there
        assert normalise(argv, there[1], there[2], snap) == normalise(argv, here[1], here[2], host.base), argv
    assert "0000:b3:00.0" in cli("run", "--print-xml", "--host-root", str(snap))[2], "the prepared NIC is taken"


@pytest.mark.parametrize(("rel", "make", "argv", "fault"), [
    ("proc/sys/net/core/somaxconn", os.mkfifo, ("tune", "plan"), "is a FIFO"),
    ("sys/kernel/mm/transparent_hugepage/enabled", os.mkdir, ("tune", "plan"), "is a directory"),
    ("run/vmharness/journal.jsonl", os.mkfifo, ("run", "--print-xml"), "is a FIFO"),
    (f"{NIC_DIR}/net/ens1f0/queues/rx-0/rps_cpus", os.mkfifo, ("tune", "plan", "--iface", "ens1f0"), "is a FIFO"),
])
def test_a_snapshot_with_a_fifo_or_folder_where_a_file_was_is_one_line(
        cli, tuned_host: FakeHost, tmp_path: Path, rel: str, make, argv: tuple[str, ...], fault: str) -> None:
    snap = snapshot_of(cli, tuned_host, tmp_path)
    path = snap / rel
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)
    cp = forked_cli.call([*argv, "--host-root", str(snap)], timeout=60, text=True)
    assert_one_line_error((cp.returncode, cp.stdout, cp.stderr), rel.rsplit("/", 1)[1], fault)


def test_a_snapshot_of_a_tree_with_fifos_where_tuning_reads_leaves_them_out(
        cli, tuned_host: FakeHost, tmp_path: Path) -> None:
    host = tuned_host
    for rel in ("proc/sys/net/core/somaxconn", "proc/irq/41/smp_affinity", "run/vmharness/journal.jsonl"):
        (host.base / rel).unlink(missing_ok=True)
        (host.base / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(host.base / rel)
    snap = snapshot_of(cli, host, tmp_path)
    for rel in ("proc/sys/net/core/somaxconn", "proc/irq/41/smp_affinity", "run/vmharness/journal.jsonl"):
        assert not (snap / rel).exists(), rel
    assert (snap / "proc/irq/42/smp_affinity").read_text() == "3\n"


def test_a_nic_a_running_domain_holds_is_refused_on_the_snapshot_as_on_the_host(
        cli, host: FakeHost, tmp_path: Path) -> None:
    build(host)
    status = ("<domstatus><domain type='kvm'><name>other</name><devices><graphics type='vnc' passwd='s3cret'/>"
              "<disk><source file='/srv/other.qcow2'/></disk><hostdev mode='subsystem' type='pci'><source>"
              "<address domain='0x0000' bus='0xb3' slot='0x00' function='0x1'/></source></hostdev></devices>"
              "</domain></domstatus>\n")
    host.write("run/libvirt/qemu/other.xml", status)
    out = tmp_path / "snap.tar.gz"
    assert cli("host-snapshot", "--host-root", str(host.base), str(out))[0] == 0
    snap = unpack(out, tmp_path / "snap")
    kept = (snap / "run/libvirt/qemu/other.xml").read_text()
    assert "0xb3" in kept and "s3cret" not in kept and "other.qcow2" not in kept  # the PCI devices alone
    said = [cli("host-prepare", "--dry-run", "--force", "--bdf", "0000:b3:00.0", "--host-root", str(root)) for root in
            (host.base, snap)]
    assert said[0][0] == said[1][0] == 2 and "libvirt domain other (0000:b3:00.1)" in said[0][2]
    assert said[1][2] == said[0][2].replace(str(host.base), str(snap))
