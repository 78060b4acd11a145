"""host-snapshot of a synthetic host: small, symlinks relative, and it answers exactly as the original."""

from __future__ import annotations

import tarfile
from pathlib import Path

from tests.fakehost import FakeHost


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
