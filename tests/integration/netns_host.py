"""A "remote host" for integration tests: a network namespace running a real OpenSSH server, reached
from the root namespace over a veth pair in 198.19.<index>.0/24 (RFC 2544 benchmarking space).

    with netns_host("client1", 7) as host:
        monkeypatch.setenv("VMHARNESS_SSH_CONFIG", str(host.ssh_config))
        Machine(host.name).run(["wrk", ...], timeout=60)

Only the network is separate: the namespace sees this machine's filesystem, programs and users, so a
command run over ssh there is this machine's command with its own NIC. Nothing that exists already is
reused; a name or index in use is an error. One thing is deleted: a namespace these tests made in a run
that was killed before it could delete it (tests/integration/netns_records.py).
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.integration.netns_records import (
    NAME,
    NETNS_DIR,
    RECORDS,
    forget,
    give_back_leftovers,
    ip,
    kill_all_in,
    record,
)
from vmharness.errors import HarnessError
from vmharness.system import proc

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
READY_TIMEOUT = 20.0  # sshd answers within about 0.1 s here


@dataclass(frozen=True)
class NetnsHost:
    name: str  # the Host alias in ssh_config: `ssh -F ssh_config name -- cmd`
    netns: str  # the network namespace: vmh-<name>
    address: str  # sshd's address, on `interface` inside the namespace
    root_address: str  # this side's address, on `root_interface` in the root namespace
    interface: str  # vmhn<index>
    root_interface: str  # vmhr<index>
    ssh_config: Path
    sshd_pid: int

    def ssh_argv(self, argv: list[str]) -> list[str]:
        """`ssh -F config name -- argv` (argv quoted for the remote shell)."""
        return ["ssh", "-F", str(self.ssh_config), self.name, "--", shlex.join(argv)]


def _refuse_if_in_use(netns: str, links: tuple[str, ...], subnet: str) -> None:
    if (NETNS_DIR / netns).exists():
        raise HarnessError(f"network namespace {netns} exists already",
                           f"{RECORDS} has no record of a killed run making it: delete it if it is a leftover")
    for link in links:
        if ip("-o", "link", "show", "dev", link, check=False).ok:
            raise HarnessError(f"network interface {link} exists already", "pick another index")
    used = ip("-o", "-4", "addr", "show", "to", subnet).stdout.strip()
    if used:
        raise HarnessError(f"{subnet} is in use already: {used.splitlines()[0]}", "pick another index")


def _keygen(path: Path, comment: str) -> None:
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], timeout=30)


def _write_configs(tmp: Path, name: str, address: str) -> tuple[Path, Path]:
    """sshd's config and the client's, with a host key and a client key made for them."""
    host_key, client_key = tmp / "ssh_host_ed25519_key", tmp / "id_ed25519"
    _keygen(host_key, f"vmh-{name} host key")
    _keygen(client_key, f"vmh-{name} client key")
    authorized = tmp / "authorized_keys"
    authorized.write_text(client_key.with_suffix(".pub").read_text())
    sshd_config = tmp / "sshd_config"
    sshd_config.write_text(
        f"ListenAddress {address}\n"
        "Port 22\n"
        f"HostKey {host_key}\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        f"AuthorizedKeysFile {authorized}\n"
        "PidFile none\n"
        "UsePAM no\n"
        "StrictModes no\n"
    )
    ssh_config = tmp / "ssh_config"
    ssh_config.write_text(
        f"Host {name}\n"
        f"    HostName {address}\n"
        "    User root\n"
        f"    IdentityFile {client_key}\n"
        "    IdentitiesOnly yes\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        "    LogLevel ERROR\n"
        "    BatchMode yes\n"
    )
    return sshd_config, ssh_config


def _stop_namespace_processes(sshd: subprocess.Popen[bytes], netns: str) -> None:
    """Stop sshd, then whatever is still in the namespace: sessions sshd forked outlive it."""
    proc.stop(sshd)
    kill_all_in(netns)


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "nothing"


def _wait_for_ssh(sshd: subprocess.Popen[bytes], ssh_config: Path, name: str, stderr: Path) -> None:
    probe = ["ssh", "-F", str(ssh_config), "-o", "ConnectTimeout=2", name, "--", "true"]
    deadline = time.monotonic() + READY_TIMEOUT
    last = None
    while time.monotonic() < deadline:
        if sshd.poll() is not None:
            raise HarnessError(f"sshd in vmh-{name} exited ({sshd.returncode}); it said: {_tail(stderr)}")
        last = proc.run(probe, timeout=10, check=False)
        if last.ok:
            return
        time.sleep(0.1)
    why = last.stderr.strip() if last else "no attempt"
    raise HarnessError(f"ssh to {name} did not work within {READY_TIMEOUT:g} s ({why}); "
                       f"sshd said: {_tail(stderr)}")


@contextlib.contextmanager
def netns_host(name: str, index: int) -> Iterator[NetnsHost]:
    """A namespace vmh-<name> with sshd on 198.19.<index>.2, reachable as ssh Host <name> through
    NetnsHost.ssh_config; sshd, the veth pair, the namespace and the temp dir are gone afterwards."""
    if not NAME.fullmatch(name):
        raise ValueError(f"netns host name {name!r}: lower-case letters, digits and '-', at most 31")
    if not 0 <= index <= 255:
        raise ValueError(f"netns host index {index}: 0..255 (it is the third octet of 198.19.<index>.0/24)")
    netns, root_if, ns_if = f"vmh-{name}", f"vmhr{index}", f"vmhn{index}"
    root_address, address = f"198.19.{index}.1", f"198.19.{index}.2"
    give_back_leftovers()
    _refuse_if_in_use(netns, (root_if, ns_if), f"198.19.{index}.0/24")

    with contextlib.ExitStack() as cleanup:  # each undo is registered once its step has succeeded
        tmp = Path(tempfile.mkdtemp(prefix=f"{netns}-"))
        cleanup.callback(forget, netns, tmp)  # the last undo: the record outlives what it names
        record(netns, ns_if, tmp)
        sshd_config, ssh_config = _write_configs(tmp, name, address)

        ip("netns", "add", netns)  # fails if another one took the name meanwhile: nothing to undo
        cleanup.callback(ip, "netns", "delete", netns)
        ip("link", "add", root_if, "type", "veth", "peer", "name", ns_if, "netns", netns)
        cleanup.callback(ip, "link", "delete", root_if, check=False)  # gone already if the netns went
        ip("addr", "add", f"{root_address}/24", "dev", root_if)
        ip("link", "set", root_if, "up")
        ip("-n", netns, "link", "set", "lo", "up")
        ip("-n", netns, "addr", "add", f"{address}/24", "dev", ns_if)
        ip("-n", netns, "link", "set", ns_if, "up")

        if not PRIVSEP_DIR.is_dir():  # shared with every sshd here: left in place
            PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
            PRIVSEP_DIR.chmod(0o755)
        stderr = tmp / "sshd.stderr"
        with stderr.open("wb") as err:
            sshd = proc.spawn(["ip", "netns", "exec", netns, SSHD, "-D", "-e", "-f", sshd_config],
                              stderr=err.fileno())
        cleanup.callback(_stop_namespace_processes, sshd, netns)
        _wait_for_ssh(sshd, ssh_config, name, stderr)

        yield NetnsHost(name=name, netns=netns, address=address, root_address=root_address, interface=ns_if,
                        root_interface=root_if, ssh_config=ssh_config, sshd_pid=sshd.pid)
