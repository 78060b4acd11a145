"""ssh into a guest the harness booted, over its management link: the benchmark layer runs nginx and
its samplers there as on any other machine. The image ships no key: at each boot the harness's own
key (made once, kept in KEY_DIR on the machine running the harness) is written into the guest's
/root/.ssh/authorized_keys through the guest agent. Host keys are the guest's own, made at its first
boot, so they are not checked (the link is a private /24 on a tap of this host). sshd listens on the
link's address alone (`listen`): the image starts no sshd, the harness does once the link is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import libvirt

from vmharness.errors import HarnessError
from vmharness.guest import agent
from vmharness.system import proc
from vmharness.system.machine import Machine, for_uri

KEY_DIR = Path("/var/lib/vmharness/ssh")
KEY = KEY_DIR / "id_ed25519"
CONTROL_DIR = "/run/vmharness"  # the shared connections' sockets (the journal's directory: root's only)


def harness_key() -> Path:
    """The private key, made on first use."""
    if not KEY.exists():
        KEY_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vmharness", "-f", str(KEY)], timeout=30)
    return KEY


# Run in the guest through the agent, the harness's public key on stdin: $1 is the management link's
# address there, $2 the same with its prefix, $3 the guest's interface on the link. The key is put into
# root's authorized_keys (exit 12 if not), the interface addressed and brought up (exit 10 or 11 if
# not), then sshd (re)starts listening on the address alone, the same way under either init: systemd
# restarts its unit; the minimal init ends an sshd an older image started at boot (on every address),
# then starts one. Prints what listens on port 22 afterwards. One command: each through the agent is a
# round trip of some 0.2 s under TCG, at every boot of a run.
_LISTEN = r"""
(umask 077
mkdir -p /root/.ssh && chmod 700 /root/.ssh &&
cat > /root/.ssh/authorized_keys.vmh && chmod 600 /root/.ssh/authorized_keys.vmh &&
exec mv -f /root/.ssh/authorized_keys.vmh /root/.ssh/authorized_keys) || exit 12
/sbin/ip addr add "$2" dev "$3" || exit 10
/sbin/ip link set dev "$3" up || exit 11
printf 'ListenAddress %s\n' "$1" > /etc/ssh/sshd_config.d/vmharness-listen.conf || exit
if [ -d /run/systemd/system ]; then
    systemctl restart ssh.service || exit
else
    if read -r pid < /run/sshd.pid 2>/dev/null && kill "$pid" 2>/dev/null; then
        n=0
        while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    fi
    mkdir -p /run/sshd && /usr/sbin/sshd || exit
fi
exec ss -Hltn 'sport = :22'
"""


def listeners(ss_output: str) -> list[str]:
    """The local addresses in `ss -Hltn` output (`198.18.1.2:22`, `[::]:22`)."""
    return [fields[3] for fields in (line.split() for line in ss_output.splitlines()) if len(fields) > 4]


def listen(dom: libvirt.virDomain, cidr: str, iface: str, timeout: float = 60) -> None:
    """Let the harness's key log in as root, address the guest's `iface` with `cidr` (its end of the
    management link), then start sshd in the guest listening on that address and nowhere else, so that
    it never answers on a passed-through NIC, which carries the benchmark: checked with `ss` in the
    guest, an error if anything else listens on port 22."""
    address = cidr.split("/")[0]
    res = agent.run(dom, ["/bin/sh", "-c", _LISTEN, "sh", address, cidr, iface], timeout=timeout,
                    input=harness_key().with_suffix(".pub").read_bytes())
    step = {10: f"ip addr add {cidr} dev {iface}", 11: f"ip link set dev {iface} up",
            12: "authorizing the harness's key"}.get(res.returncode)
    if step is not None:
        raise HarnessError(f"in the guest, {step} failed: {res.stderr.strip()}", "see the console log")
    if not res.ok:
        raise res.failure("in the guest, starting sshd on the management link: ")
    found = listeners(res.stdout)
    if found != [f"{address}:22"]:
        raise HarnessError(f"sshd in the guest listens on {', '.join(found) or 'nothing'}, not on "
                           f"{address}:22 alone", "does the image's sshd_config include sshd_config.d/? "
                           "(`vmharness vm exec NAME -- ss -ltn` shows the listeners)")


def machine(address: str, uri: str, kvm: bool = True) -> Machine:
    """The guest as a Machine (its link address, without the prefix). One connection carries every
    command (ControlMaster): a new ssh session costs sshd a fork, an exec and a key exchange each
    time, which a slow guest feels (35 to 50 s each under TCG inside TCG, 3.6 s over the master). A
    guest on a remote libvirt host is reached through that host (ProxyJump)."""
    options = ["-F", "none", "-i", str(harness_key()), "-o", "IdentitiesOnly=yes",
               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
               "-o", "ConnectTimeout=120", "-o", "ControlMaster=auto", "-o", f"ControlPath={CONTROL_DIR}/ssh-%C",
               "-o", "ControlPersist=120"]
    host = for_uri(uri)
    if not host.local:
        options += ["-o", f"ProxyJump={host.ssh}"]
    return Machine(f"root@{address}", tuple(options), name="guest", guest=True,
                   patience=agent.patience(kvm))


def close(m: Machine) -> None:
    """End the shared connection (its master process exits; it would after ControlPersist anyway)."""
    assert m.ssh is not None
    proc.run(["ssh", *m.options, "-O", "exit", "--", m.ssh], timeout=30, check=False)


def wait(m: Machine, timeout: float, still: Callable[[], bool] = lambda: True) -> float:
    """Until sshd in the guest lets the harness in; returns the seconds it took. `still` says whether the
    guest still runs: one that stopped is said at once, not after `timeout` (its tap gone, every try
    fails at once, and a lost guest held its run for the whole boot timeout)."""
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < timeout:
        if not still():
            raise HarnessError(f"ssh into the guest ({m.ssh}): the guest stopped before sshd let the harness in",
                               "its console log says why")
        try:
            res = m.run(["true"], timeout=30, check=False)
        except HarnessError as exc:
            last = exc.message
        else:
            if res.ok:
                return time.monotonic() - started
            last = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        time.sleep(0.25)  # sshd starts a moment after the agent answers
    raise HarnessError(f"ssh into the guest ({m.ssh}) did not work within {timeout:g} s: {last}",
                       "is sshd in the image? `vmharness vm console` shows the guest's boot")
