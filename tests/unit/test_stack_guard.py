"""The SSH guard follows the stack: a port is refused when anything stacked on it (bond, bridge, VLAN,
macvlan, ipvlan, OVS) holds a route or an address, and the refusal names the chain. Synthetic hosts
with sysfs links shaped as the kernel makes them (read from a real bridge and macvlan in a network
namespace)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from tests.unit.conftest import Cli
from vmharness.errors import HarnessError
from vmharness.host.inspect import probes
from vmharness.host.inspect.net import survey, verdict
from vmharness.host.prepare import plan
from vmharness.system.root import HostRoot

MLX, CX5 = 0x15B3, 0x1019
SSH = "SSH_CONNECTION"


def card(tmp_path: Path) -> FakeHost:
    """A dual-port card whose ports sit in groups of their own, and a management NIC with nothing on it."""
    host = FakeHost(tmp_path / "root")
    host.pci("0000:b3:00.0", MLX, CX5, driver="mlx5_core", group=40, netdevs=("ens1f0",))
    host.pci("0000:b3:00.1", MLX, CX5, driver="mlx5_core", group=41, netdevs=("ens1f1",))
    host.pci("0000:00:19.0", 0x8086, 0x15B7, driver="e1000e", group=3, netdevs=("eno1",))
    return host


def make(host: FakeHost, bdf: str, *, force: bool = False) -> plan.Plan:
    return plan.make(HostRoot(host.base), plan.Request((bdf,), force=force))


def refusal(host: FakeHost, bdf: str = "0000:b3:00.0") -> str:
    with pytest.raises(HarnessError) as e:
        make(host, bdf)
    assert "--force" in e.value.hint
    return e.value.message


def in_use(host: FakeHost, iface: str, env: dict[str, str] | None = None) -> verdict.InUse | None:
    root = HostRoot(host.base)
    return verdict.in_use(root, iface, survey.reasons(root, env if env is not None else {}))


def bond_in_bridge(host: FakeHost) -> None:
    host.bond("bond0", ("ens1f0",))
    host.bridge("vmbr0", ("bond0",))
    host.address("vmbr0", "192.0.2.10", 24)
    host.route("vmbr0", "0.0.0.0", "0.0.0.0", gateway="192.0.2.1")


def vlan_on_bond(host: FakeHost) -> None:
    host.bond("bond0", ("ens1f0",))
    host.address(host.vlan("bond0", 100), "192.0.2.10", 24)


def bridge(host: FakeHost) -> None:
    host.bridge("br0", ("ens1f0",))
    host.address("br0", "192.0.2.10", 24)


def vlan(host: FakeHost) -> None:
    host.address(host.vlan("ens1f0", 100), "192.0.2.10", 24)


def macvlan(host: FakeHost) -> None:
    host.macvlan("ens1f0", "mv0")
    host.address("mv0", "192.0.2.10", 24)


def ipvlan_in_bridge(host: FakeHost) -> None:
    host.macvlan("ens1f0", "ipvl0")
    host.bridge("br1", ("ipvl0",))
    host.address6("br1", "2001:db8::10")


STACKS: list[tuple[Callable[[FakeHost], None], str]] = [
    (bond_in_bridge, "0000:b3:00.0 (ens1f0) → bond0 → vmbr0 holds route 192.0.2.0/24, default route, "
                     "address 192.0.2.10"),
    (vlan_on_bond, "0000:b3:00.0 (ens1f0) → bond0 → bond0.100 holds route 192.0.2.0/24, address 192.0.2.10"),
    (bridge, "0000:b3:00.0 (ens1f0) → br0 holds route 192.0.2.0/24, address 192.0.2.10"),
    (vlan, "0000:b3:00.0 (ens1f0) → ens1f0.100 holds route 192.0.2.0/24, address 192.0.2.10"),
    (macvlan, "0000:b3:00.0 (ens1f0) → mv0 holds route 192.0.2.0/24, address 192.0.2.10"),
    (ipvlan_in_bridge, "0000:b3:00.0 (ens1f0) → ipvl0 → br1 holds address 2001:db8::10"),
]


@pytest.mark.parametrize(("build", "chain"), STACKS, ids=[b.__name__ for b, _ in STACKS])
def test_a_port_under_a_device_that_holds_an_address_is_refused_naming_the_chain(
        tmp_path: Path, build: Callable[[FakeHost], None], chain: str) -> None:
    host = card(tmp_path)
    build(host)
    assert refusal(host) == f"{chain}: this is probably your SSH connection"


@pytest.mark.parametrize(("build", "chain"), STACKS, ids=[b.__name__ for b, _ in STACKS])
def test_the_other_port_of_the_same_card_is_allowed(tmp_path: Path, build: Callable[[FakeHost], None],
                                                   chain: str) -> None:
    host = card(tmp_path)
    build(host)
    p = make(host, "0000:b3:00.1")
    assert [b.bdf for b in p.binds] == ["0000:b3:00.1"] and p.warnings == []


def test_force_takes_a_stacked_port_with_a_warning_naming_the_chain(tmp_path: Path) -> None:
    host = card(tmp_path)
    bond_in_bridge(host)
    p = make(host, "0000:b3:00.0", force=True)
    assert [b.bdf for b in p.binds] == ["0000:b3:00.0"]
    assert p.warnings == ["--force: 0000:b3:00.0 (ens1f0) → bond0 → vmbr0 holds route 192.0.2.0/24, "
                          "default route, address 192.0.2.10; it will lose it"]


def test_every_holder_on_the_stack_is_named_nearest_first(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.bond("bond0", ("ens1f0",))
    host.address("bond0", "198.18.0.1", 24)
    host.address(host.vlan("bond0", 7), "192.0.2.10", 24)
    assert str(in_use(host, "ens1f0")) == ("ens1f0 → bond0 holds route 198.18.0.0/24, address 198.18.0.1; "
                                           "ens1f0 → bond0 → bond0.7 holds route 192.0.2.0/24, address 192.0.2.10")


# --- each kind of link is enough on its own ---------------------------------------------------------
def test_a_master_link_alone_is_followed(tmp_path: Path) -> None:
    host = card(tmp_path)  # an older snapshot: master, no upper_/lower_ links
    host.virtual_netdev("bond0")
    host.enslave("ens1f0", "bond0")
    host.address("bond0", "192.0.2.10", 24)
    assert str(in_use(host, "ens1f0")).startswith("ens1f0 → bond0 holds ")


@pytest.mark.parametrize("keep", ["brif", "lower_", "upper_"])
def test_a_bridge_port_is_found_from_any_one_of_its_links(tmp_path: Path, keep: str) -> None:
    host = card(tmp_path)
    bridge(host)
    port, br = host.base / "sys/devices/pci0000:b3/0000:b3:00.0/net/ens1f0", host.base / "sys/devices/virtual/net/br0"
    links = {"brif": br / "brif/ens1f0", "lower_": br / "lower_ens1f0", "upper_": port / "upper_br0"}
    (port / "master").unlink()
    for name, link in links.items():
        if name != keep:
            link.unlink()
    assert str(in_use(host, "ens1f0")).startswith("ens1f0 → br0 holds ")


def test_a_bond_slave_is_found_from_bonding_slaves_alone(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.bond("bond0", ("eno1", "ens1f0"))
    host.address("bond0", "192.0.2.10", 24)
    for link in ("sys/devices/pci0000:b3/0000:b3:00.0/net/ens1f0/upper_bond0",
                 "sys/devices/pci0000:b3/0000:b3:00.0/net/ens1f0/master",
                 "sys/devices/virtual/net/bond0/lower_ens1f0"):
        (host.base / link).unlink()
    assert str(in_use(host, "ens1f0")).startswith("ens1f0 → bond0 holds ")


def test_a_vlan_is_found_from_proc_net_vlan_config_alone(tmp_path: Path) -> None:
    host = card(tmp_path)
    vlan(host)
    (host.base / "sys/devices/pci0000:b3/0000:b3:00.0/net/ens1f0/upper_ens1f0.100").unlink()
    (host.base / "sys/devices/virtual/net/ens1f0.100/lower_ens1f0").unlink()
    assert str(in_use(host, "ens1f0")).startswith("ens1f0 → ens1f0.100 holds ")


def test_a_loop_of_links_ends(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.virtual_netdev("a")
    host.stack("ens1f0", "a")
    host.stack("a", "ens1f0")
    assert in_use(host, "ens1f0") is None


# --- Open vSwitch -------------------------------------------------------------------------------------
def test_an_ovs_port_holds_what_an_ovs_bridge_interface_holds_and_says_why(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.ovs(("ens1f0",), bridges=("br-ex",))
    host.address("br-ex", "192.0.2.10", 24)
    message = refusal(host)
    assert message.startswith("0000:b3:00.0 (ens1f0) → ovs-system → br-ex holds route 192.0.2.0/24, "
                              "address 192.0.2.10 (ens1f0 is an Open vSwitch port: ")
    assert "never to its bridge's own interface" in message


def test_an_ovs_port_is_not_taken_for_a_linux_bridge_or_a_bond_or_another_ports_address(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.ovs(("ens1f0", "ens1f1"))
    host.bridge("docker0", ())
    host.address("docker0", "172.17.0.1", 16)
    host.bond("bond9", ())
    host.address("bond9", "10.9.0.1", 24)
    host.address("ens1f1", "198.18.0.1", 24)  # another port's own address is not on ens1f0's stack
    assert in_use(host, "ens1f0") is None
    assert [b.bdf for b in make(host, "0000:b3:00.0").binds] == ["0000:b3:00.0"]


# --- the SSH session ----------------------------------------------------------------------------------
def ssh_host(tmp_path: Path) -> FakeHost:
    host = card(tmp_path)
    host.address("eno1", "198.18.0.2", 24)
    host.route("eno1", "0.0.0.0", "0.0.0.0", gateway="198.18.0.1")
    bond_in_bridge(host)  # vmbr0 has a default route too, with a worse metric
    return host


@pytest.mark.parametrize(("peer", "iface"), [
    ("192.0.2.77", "vmbr0"),  # on vmbr0's own subnet: the longer prefix wins over eno1's default
    ("203.0.113.9", "eno1"),  # the first default route in the table
    ("::ffff:192.0.2.77", "vmbr0"),  # an IPv4 session on an IPv6 socket
])
def test_the_route_to_the_ssh_peer_is_the_longest_prefix_match(tmp_path: Path, peer: str, iface: str) -> None:
    host = ssh_host(tmp_path)
    held = survey.reasons(HostRoot(host.base), {SSH: f"{peer} 51234 198.18.0.2 22"})
    assert held.ssh_iface == iface
    assert held.by_iface[iface][0] == f"the route to your SSH peer {peer.removeprefix('::ffff:')}"


def test_a_lower_metric_wins_among_equal_prefixes(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.route("ens1f0", "0.0.0.0", "0.0.0.0", gateway="198.18.0.1")
    host.route("eno1", "0.0.0.0", "0.0.0.0", gateway="198.18.0.1")
    route = (host.base / "proc/net/route").read_text().splitlines()
    fields = route[1].split("\t")
    fields[6] = "100"  # ens1f0's default route: metric 100
    (host.base / "proc/net/route").write_text("\n".join([route[0], "\t".join(fields), route[2]]) + "\n")
    assert survey.reasons(HostRoot(host.base), {SSH: "203.0.113.9 1 198.18.0.2 22"}).ssh_iface == "eno1"


def test_an_ipv6_peer_follows_ipv6_routes_and_a_link_local_one_its_scope(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.route6("eno1", "::", 0)
    host.route6("vmbr9", "2001:db8::", 64)
    host.route6("lo", "2001:db8::", 96)  # a local-table route on lo never carries a session out
    root = HostRoot(host.base)
    assert survey.reasons(root, {SSH: "2001:db8::9 5 2001:db8::1 22"}).ssh_iface == "vmbr9"
    assert survey.reasons(root, {SSH: "2001:db9::9 5 2001:db8::1 22"}).ssh_iface == "eno1"
    assert survey.reasons(root, {SSH: "fe80::9%ens1f1 5 fe80::1 22"}).ssh_iface == "ens1f1"


def test_a_port_carrying_the_ssh_session_is_refused_as_your_ssh_connection(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    host = ssh_host(tmp_path)
    env = {SSH: "192.0.2.77 51234 192.0.2.10 22"}
    reasons = survey.reasons
    monkeypatch.setattr(survey, "reasons", lambda root: reasons(root, env))
    assert refusal(host) == ("0000:b3:00.0 (ens1f0) → bond0 → vmbr0 holds the route to your SSH peer 192.0.2.77, "
                             "route 192.0.2.0/24, default route, address 192.0.2.10: this is your SSH connection")
    env[SSH] = "203.0.113.9 51234 198.18.0.2 22"
    assert refusal(host).endswith(": the host uses it (your SSH connection leaves by eno1)")
    assert refusal(host, "0000:00:19.0").startswith("0000:00:19.0 (eno1) holds the route to your SSH peer 203.0.113.9")


@pytest.mark.parametrize("text", ["127.0.0.1 5 127.0.0.1 22", "::1 5 ::1 22", "198.18.0.2 5 198.18.0.2 22"])
def test_a_session_from_this_host_itself_names_no_nic(tmp_path: Path, text: str) -> None:
    host = ssh_host(tmp_path)
    held = survey.reasons(HostRoot(host.base), {SSH: text})
    assert held.ssh_iface is None and held.unreadable == []


@pytest.mark.parametrize("text", [
    "", "garbage", "192.0.2.1 22", "192.0.2.1 x 192.0.2.2 22", "192.0.2.1 1 192.0.2.2 99999",
    "300.1.1.1 1 192.0.2.2 22", "-oProxyCommand=x 1 2 3", "192.0.2.1 1 192.0.2.2 22 extra", "a" * 100_000,
    "192.0.2.1\x00 1 192.0.2.2 22", "fe80::1%%% 1 ::1 22",
])
def test_a_garbled_ssh_connection_keeps_every_nic_in_use(tmp_path: Path, text: str) -> None:
    host = card(tmp_path)
    why = in_use(host, "ens1f1", {SSH: text})
    assert why is not None and "SSH_CONNECTION holds" in str(why)
    assert len(str(why)) < 400


def test_an_ssh_peer_no_route_reaches_keeps_every_nic_in_use(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.address("eno1", "198.18.0.2", 24)
    why = in_use(host, "ens1f1", {SSH: "203.0.113.9 5 198.18.0.2 22"})
    assert why is not None and "no route in /proc/net/route or /proc/net/ipv6_route reaches" in str(why)


def test_ssh_connection_is_found_in_an_ancestor_when_sudo_dropped_it() -> None:
    # sh keeps SSH_CONNECTION in its environment; the python it starts has it removed, as sudo does
    code = ("import os; from vmharness.host.inspect import probes; from vmharness.system import root; "
            "print(probes.ssh_connection(root.HostRoot('/'), os.environ))")
    env = {**os.environ, SSH: "192.0.2.5 4242 192.0.2.6 22"}
    out = subprocess.run(["sh", "-c", 'env -u SSH_CONNECTION "$0" -c "$1"; true', sys.executable, code],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "192.0.2.5 4242 192.0.2.6 22", out.stderr


def test_a_snapshot_is_not_judged_by_the_ssh_session_running_the_harness(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    host = card(tmp_path)
    monkeypatch.setenv(SSH, "garbage")
    assert verdict.in_use(HostRoot(host.base), "ens1f1", survey.reasons(HostRoot(host.base))) is None


@pytest.mark.parametrize(("recorded", "iface"), [("192.0.2.77 1 192.0.2.10 22", "vmbr0"), (None, None)])
def test_a_snapshot_is_judged_by_the_ssh_session_it_recorded(tmp_path: Path, recorded: str | None,
                                                             iface: str | None) -> None:
    host = ssh_host(tmp_path)
    host.write(probes.PROBES_FILE, json.dumps({"ssh_connection": recorded}))
    assert survey.reasons(HostRoot(host.base)).ssh_iface == iface


def test_a_recorded_ssh_session_that_is_not_text_keeps_every_nic_in_use(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.write(probes.PROBES_FILE, json.dumps({"ssh_connection": ["192.0.2.77", 1]}))
    root = HostRoot(host.base)
    why = verdict.in_use(root, "ens1f1", survey.reasons(root))
    assert why is not None and "SSH_CONNECTION holds" in str(why)


# --- what cannot be read keeps the port in use ---------------------------------------------------------
def test_bonding_slaves_that_cannot_be_read_keep_its_slaves_in_use(tmp_path: Path) -> None:
    host = card(tmp_path)
    host.bond("bond0", ("ens1f0",))
    (host.base / "sys/devices/virtual/net/bond0/bonding/slaves").unlink()
    why = in_use(host, "ens1f0")
    assert why is not None and "bond0/bonding/slaves cannot be read" in str(why)
    assert in_use(host, "ens1f1") is None


def test_an_upper_device_that_is_not_there_keeps_the_port_in_use(tmp_path: Path) -> None:
    host = card(tmp_path)
    link = host.base / "sys/devices/pci0000:b3/0000:b3:00.0/net/ens1f0/upper_vmbr7"
    link.symlink_to("../../../../virtual/net/vmbr7")
    why = in_use(host, "ens1f0")
    assert why is not None and "/sys/class/net/vmbr7/operstate cannot be read" in str(why)


def test_a_netdev_link_leading_out_of_the_root_keeps_it_in_use(tmp_path: Path) -> None:
    host = card(tmp_path)
    (host.base / "sys/class/net/evil").symlink_to("/sys/devices/virtual/net/lo")
    host.stack("ens1f0", "eno1")
    (host.base / "sys/devices/pci0000:00/0000:00:19.0/net/eno1/upper_evil").symlink_to(
        os.path.relpath(host.base / "sys/class/net/evil", host.base / "sys/devices/pci0000:00/0000:00:19.0/net/eno1"))
    why = in_use(host, "ens1f0")
    assert why is not None and "points outside host root" in str(why)


@pytest.mark.parametrize(("text", "fault"), [
    ("garbage\n", "/proc/net/vlan/config line 1 is garbled"),
    ("VLAN Dev name | VLAN ID\nName-Type: X\nens1f0.5 | 5\n", "/proc/net/vlan/config line 3 is garbled"),
])
def test_a_garbled_vlan_table_keeps_every_nic_in_use(tmp_path: Path, text: str, fault: str) -> None:
    host = card(tmp_path)
    host.write("proc/net/vlan/config", text)
    why = in_use(host, "ens1f1")
    assert why is not None and fault in str(why)


# --- the views ------------------------------------------------------------------------------------------
def test_host_groups_shows_the_chain_and_a_snapshot_says_the_same(cli: Cli, tmp_path: Path) -> None:
    host = card(tmp_path)
    bond_in_bridge(host)
    host.ovs(("ens1f1",))
    host.address(host.vlan("br-ex", 9), "198.18.5.1", 24)
    code, out, _ = cli("host-groups", "--host-root", str(host.base))
    assert code == 0
    assert "ens1f0 [IN USE: via bond0 → vmbr0: route 192.0.2.0/24, default route +1 more]" in out
    assert "ens1f1 [IN USE: via ovs-system → br-ex → br-ex.9: route 198.18.5.0/24, address 198.18.5.1]" in out
    assert "eno1 [IN USE" not in out
    snap_tar = tmp_path / "snap.tar.gz"
    assert cli("host-snapshot", "--host-root", str(host.base), str(snap_tar))[0] == 0
    snap = tmp_path / "snap"
    snap.mkdir()
    with tarfile.open(snap_tar) as t:
        t.extractall(snap, filter="tar")
    original = cli.json("host-groups", "--host-root", str(host.base))
    assert cli.json("host-groups", "--host-root", str(snap)) == original
    devices = {d["bdf"]: d for g in original["groups"] for d in g["devices"]}
    assert devices["0000:b3:00.0"]["active"] == {
        "ens1f0": "ens1f0 → bond0 → vmbr0 holds route 192.0.2.0/24, default route, address 192.0.2.10"}
