"""Beside the hostile table of values (test_hostile_values.py), what a table cannot check: a device
named twice is one hostdev, bind and udev line; the wire's own end, a VPN and the harness's own links
are not "another interface" while a lab network is; no reader takes digits that are not ASCII; and the
two errors a user meets on a real machine (a port already taken, a client ssh cannot reach) provoked
for real, on this machine only (bench takes the host lock: run this file under the helpers' lock)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests import forked_cli, hostile_kit
from tests.fakehost import FakeHost
from vmharness.cli import main as cli
from vmharness.host.inspect import wire_routes
from vmharness.system.root import HostRoot

NIC = "0000:b3:00.0"


# --- a device named twice is one device ----------------------------------------------------------
def _prepared_host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root", nodes=2, cpus_per_node=4)
    host.pci(NIC, hostile_kit.MLX, hostile_kit.CX5, driver="vfio-pci", group=40, numa=1)
    host.pci("0000:00:02.0", 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
    host.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    return host


def _hostdevs(out: str) -> list[int]:
    """The number of hostdevs in each domain `run --print-xml` printed."""
    return [len(ET.fromstring(part.split("-->", 1)[1]).findall("devices/hostdev")) for part in out.split("<!--")[1:]]


@pytest.mark.parametrize("argv, toml", [
    (["--bdf", NIC, "--bdf", "b3:00.0"], ""),
    (["--bdf", "B3:00.0", "--bdf", NIC, "--bdf", NIC], ""),
    ([], f'[guest]\nbdf = ["{NIC}", "b3:00.0", "0000:B3:00.0"]\n'),
])
def test_a_device_named_twice_is_one_hostdev(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                             toml: str) -> None:
    host = _prepared_host(tmp_path)
    conf = tmp_path / "r.toml"
    conf.write_text(toml)
    code = cli.main(["run", *([str(conf)] if toml else []), "--print-xml", "--host-root", str(host.base), *argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    counts = _hostdevs(out.out)
    assert counts and set(counts) == {1}, out.out  # each instance's domain: one hostdev
    assert f"passing through {NIC} (vfio-pci" in out.err and out.err.count(NIC) == 1, out.err


def test_host_prepare_and_host_setup_take_a_device_named_twice_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = FakeHost(tmp_path / "root", nodes=2)
    host.pci(NIC, hostile_kit.MLX, hostile_kit.CX5, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f0",))
    twice = ["--bdf", NIC, "--bdf", "b3:00.0", "--host-root", str(host.base)]
    assert cli.main(["host-prepare", "--dry-run", "--json", *twice]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [b["bdf"] for b in plan["binds"]] == [NIC]
    assert cli.main(["host-setup", "--print", *twice]) == 0
    text = capsys.readouterr().out
    assert text.count(f'KERNEL=="{NIC}"') == 1 and text.count("softdep mlx5_core pre: vfio-pci") == 1


def test_vm_up_takes_a_device_named_twice_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = _prepared_host(tmp_path)
    code = cli.main(["vm", "up", "--print-xml", "--no-link", "--host-root", str(host.base), "--bdf", NIC,
                     "--bdf", "b3:00.0"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert len(ET.fromstring(out.out).findall("devices/hostdev")) == 1


def test_no_reader_takes_digits_that_are_not_ascii() -> None:
    """`str.isdigit` and a regex's `\\d` both take Unicode digits: every reader goes through digits.py."""
    package = Path(cli.__file__).parent
    for path in package.rglob("*.py"):
        text = path.read_text()
        if path.name != "digits.py":
            assert ".isdigit()" not in text, f"{path}: use digits.is_digits"
        assert not re.search(r"""r["'][^"'\n]*\\d""", text), f"{path}: a regex with \\d matches any Unicode digit"


# --- the wire against the host's routes: what is the wire's own is not "another interface" --------------
def _wire_host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root")
    host.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    host.route("tun0", "0.0.0.0", "128.0.0.0", "10.8.0.1")  # a VPN's halves of the default route
    host.route("tun0", "128.0.0.0", "128.0.0.0", "10.8.0.1")
    host.address("ens1f1", "198.19.0.1", 24)  # a local client's end of the wire
    host.address("vmh-rabc", "198.18.1.1", 24)  # a management link the harness made
    return host


def test_the_wire_s_own_end_a_vpn_and_the_harness_s_links_are_not_another_interface(tmp_path: Path) -> None:
    root = HostRoot(_wire_host(tmp_path).base)
    wire_routes.check(root, "198.19.0.2/24", "198.19.0.1/24", "guest.address")
    wire_routes.check(root, "198.18.1.2/24", "198.18.1.3/24", "guest.address")


def test_the_same_network_on_another_interface_is_refused_naming_it(tmp_path: Path) -> None:
    host = _wire_host(tmp_path)
    host.address("eth1", "198.19.5.1", 24)
    root = HostRoot(host.base)
    with pytest.raises(Exception, match=r"--address 198\.19\.5\.2/24: the wire's network 198\.19\.5\.0/24 overlaps "
                                        r"198\.19\.5\.0/24, which this host routes through eth1"):
        wire_routes.check(root, "198.19.5.2/24", "198.19.5.3/24", "--address 198.19.5.2/24")
    wire_routes.check(root, "198.19.0.2/24", "198.19.0.1/24", "--address 198.19.0.2/24")  # ens1f1's own


# --- the two errors met on a real machine ----------------------------------------------------------------
def _vmharness(args: list[str], cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 240) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_")}
    return forked_cli.call(args, cwd, {**clean, **(env or {})}, timeout, text=True)


def _error_and_hint(stderr: str) -> tuple[str, str]:
    lines = [ln for ln in stderr.splitlines() if ln.startswith(("error: ", "hint: "))]
    assert len(lines) == 2 and "Traceback" not in stderr, stderr
    return lines[0], lines[1]


def test_a_port_already_taken_names_the_port_and_the_process_holding_it(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        (tmp_path / "c.toml").write_text(
            f'[server]\nlisten = "127.0.0.1:{port}"\nurl = "http://127.0.0.1:{port}/"\n'
            '[sweep]\nconnections = "1"\niterations = 1\nduration = 1\nwarmup = 0\n'
            '[load]\npercents = []\ncapacity = 0\n')
        res = _vmharness(["bench", "c.toml", "--out", "run"], tmp_path)
    error, hint = _error_and_hint(res.stderr)
    assert res.returncode == 2
    assert f"error: port {port} (127.0.0.1:{port}) on this machine is taken: held by pid {os.getpid()} (" in error
    assert "server.listen" in hint and "nginx:" not in error


def test_a_client_ssh_cannot_reach_is_named_with_ssh_s_reason_and_a_hint(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"  # the alias leads to a port nothing listens on, on this machine
    config.write_text("Host vmh-unreachable\n  HostName 127.0.0.1\n  Port 1\n")
    res = _vmharness(["tune", "plan", "--target", "client:vmh-unreachable"], tmp_path,
                     env={"VMHARNESS_SSH_CONFIG": str(config)}, timeout=60)
    error, hint = _error_and_hint(res.stderr)
    assert res.returncode == 2
    assert re.search(r"vmh-unreachable is unreachable over ssh \(exit 255\): ssh: connect to host 127\.0\.0\.1 "
                     r"port 1: Connection refused$", error), error
    assert "sh -c" not in error and "head -c" not in error  # no internal script quoted
    assert "`ssh vmh-unreachable true`" in hint and "BatchMode" in hint and str(config) in hint
