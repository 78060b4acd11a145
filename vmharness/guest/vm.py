"""A guest's life: define, start, wait for the agent, shut down, undefine.

Every boot runs on a fresh copy-on-write overlay of the image (the image itself is never written).
The overlay and the domain are journaled before they exist, with their owner (`vm:NAME` for `vm up`,
a run's id for its guests), and `up` undoes both on any failure, Ctrl-C, SIGTERM or SIGHUP; a
harness that dies outright leaves them to the next run (a run's) or to `host-restore`. The journal's
`domain` op is registered here, beside the code that makes the change: guests own their undo (the
overlay is a journal.files `file`). The caller holds the host lock (journal.Lock) around `up` and
`down`. What is kept about a running guest is record.py's; asking it things is running.py's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import libvirt

from vmharness.errors import HarnessError
from vmharness.guest import agent, ssh
from vmharness.guest.domain import DomainSpec
from vmharness.guest.record import DOMAIN_PREFIX, Guest, domain_name, forget, save
from vmharness.guest.running import console_tail
from vmharness.host.libvirt import api
from vmharness.journal import files, journal
from vmharness.journal.journal import Op
from vmharness.journal.kinds import OpKind
from vmharness.progress import Progress, Say
from vmharness.signals import shielded
from vmharness.system.machine import Machine, for_uri
from vmharness.system.root import HostRoot


def _wait_for_agent(dom: libvirt.virDomain, log: str, machine: Machine, timeout: float) -> float:
    started = time.monotonic()
    looked = started
    while time.monotonic() - started < timeout:
        if not dom.isActive():
            raise _stopped(dom, log, machine, "while booting")
        if agent.ping(dom, timeout=3):
            return time.monotonic() - started
        if time.monotonic() - looked > 5:  # a panicked guest stays up: read its console now and then
            looked = time.monotonic()
            tail = console_tail(log, machine, lines=60)
            if "Kernel panic - not syncing" in tail:
                raise HarnessError("the guest kernel panicked while booting; its console ends with:\n"
                                   + _indent(tail[tail.index("Kernel panic"):]),
                                   "check the kernel, its cmdline (root=, init=) and its drivers; the whole "
                                   "console log is " + log)
        time.sleep(0.2)  # the agent answers a fraction of a second after it starts
    raise HarnessError(f"the guest agent did not answer within {timeout:g} s; the console ends with:\n"
                       + _indent(console_tail(log, machine)),
                       "raise --boot-timeout (TCG boots take tens of seconds), or check the console log " + log)


def _stopped(dom: libvirt.virDomain, log: str, machine: Machine, when: str,
             kind: type[HarnessError] = HarnessError) -> HarnessError:
    """The error (a `kind`) for a guest that stopped `when`: libvirt's reason, its console's and its QEMU
    log's ends."""
    return kind(f"the guest stopped {when} ({_why_stopped(dom)}); its console ends with:\n"
                + _indent(console_tail(log, machine)) + _qemu_log_tail(dom, machine),
                "check the kernel and cmdline; the whole console log is " + log)


class GuestLost(HarnessError):
    """A guest lost after its agent answered: it stopped, or its agent went silent while it ran (a guest
    that reset, an agent that ended). Unlike a kernel that panics or never answers, what a second boot of
    the same guest may not meet (experiment/runner.py boots it once more)."""


# Seconds a failed step waits for libvirt to report a stopped guest: the agent's "disappeared while
# executing command" can come before the domain's end (a guest destroyed from outside at its agent's first
# answer was once still "being shut down" when the error came, active to libvirt, and stopped within 2 s).
SETTLE = 2.0


def _stops_within(dom: libvirt.virDomain, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while is_running(dom):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def is_running(dom: libvirt.virDomain) -> bool:
    """Whether the domain runs; one libvirt cannot tell of counts as stopped."""
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError:
        return False


@contextmanager
def said_if_it_stops(dom: libvirt.virDomain, log: str, machine: Machine, when: str) -> Iterator[None]:
    """An error in the block from a guest that is no longer running becomes `_stopped`'s: an agent's
    "domain is not running" alone said nothing of why (an L2 in the rig's L1 under 7.3 that ended after
    its agent answered, in a clean clone on 2026-12-03). An agent that stops answering while its guest
    runs (libvirt: "Guest agent is not responding", once the agent's channel closed or a command timed
    out: a guest that reset, or the agent's process ended) is said with the console's end as well: the
    same L2 in the next clean clone failed so, and nothing else said what the guest had done."""
    try:
        yield
    except HarnessError as exc:
        if _stops_within(dom, SETTLE):
            raise _stopped(dom, log, machine, when, GuestLost) from exc
        if agent.SAID not in exc.message:
            raise
        raise GuestLost(f"the guest agent stopped answering {when}, the guest still running ({exc.message}); "
                        "its console ends with:\n" + _indent(console_tail(log, machine)),
                        "a guest that reset or whose agent ended says so on its console; the whole console "
                        "log is " + log) from exc


# libvirt's reason for a domain it has stopped. Every lifecycle event of the harness's domains is
# "destroy" (domain.py), so a guest that resets (a reboot, a panic with panic=N, a triple fault) is
# stopped too, as libvirt reports it: "shutdown" through QEMU's -no-reboot, "destroyed" where libvirt
# handles the reset itself.
_SHUTOFF = {
    libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN: "libvirt: shut down, by the guest's power-off or reset",
    libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED: "libvirt: destroyed, on the guest's reset or from outside",
    libvirt.VIR_DOMAIN_SHUTOFF_CRASHED: "libvirt: its QEMU ended unexpectedly (killed, or crashed)",
    libvirt.VIR_DOMAIN_SHUTOFF_FAILED: "libvirt: its QEMU failed to start",
    libvirt.VIR_DOMAIN_SHUTOFF_DAEMON: "libvirt: stopped by the daemon",
}


def _why_stopped(dom: libvirt.virDomain) -> str:
    try:
        state, reason = dom.state()
    except libvirt.libvirtError as exc:
        return f"libvirt did not say why: {str(exc).strip()}"
    if state != libvirt.VIR_DOMAIN_SHUTOFF:
        return f"libvirt: state {state}, reason {reason}"
    return _SHUTOFF.get(reason, f"libvirt: shut off, reason {reason}")


# Where libvirt's system daemon keeps each domain's QEMU log: what QEMU printed to its stderr, and the
# daemon's line on why it stopped it ("shutting down, reason=..."; "terminating on signal ...").
QEMU_LOGS = "/var/log/libvirt/qemu"


def _qemu_log_tail(dom: libvirt.virDomain, machine: Machine, lines: int = 6) -> str:
    """The log's last lines past the QEMU command line libvirt wrote at the start (its lines end in a
    backslash, the last one is `-msg ...`)."""
    res = machine.run(["tail", "-n", "40", f"{QEMU_LOGS}/{dom.name()}.log"], timeout=30, check=False)
    said = [line[:300] for line in res.stdout.replace("\r", "").splitlines()
            if line.strip() and not line.endswith("\\") and not line.startswith("-")] if res.ok else []
    return "\nits QEMU's log ends with:\n" + _indent("\n".join(said[-lines:])) if said else ""


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines()) or "    (empty)"


def _link_up(guest_dom: libvirt.virDomain, spec: DomainSpec, machine: Machine, net: tuple[str, str]) -> None:
    """Address both ends of the management link (the host's tap and the guest's virtio-net), then start
    sshd in the guest on its end alone."""
    assert spec.link is not None
    host_addr, guest_addr = net
    machine.run(["ip", "addr", "add", host_addr, "dev", spec.link.tap], timeout=10)
    machine.run(["ip", "link", "set", "dev", spec.link.tap, "up"], timeout=10)
    ifname = agent.interfaces(guest_dom).get(spec.link.mac)
    if ifname is None:
        raise HarnessError(f"the guest has no interface with MAC {spec.link.mac}", "is virtio_net in its kernel?")
    ssh.listen(guest_dom, guest_addr, ifname, timeout=30 * agent.patience(spec.kvm))


def up(root: HostRoot, spec: DomainSpec, uri: str, base_disk: str, xml: str, say: Say, owner: str,
       boot_timeout: float = 300, link_net: tuple[str, str] | None = None) -> Guest:
    """Boot the guest `spec` describes (its overlay over `base_disk`) and wait for its agent. `owner`
    goes into its journal records, so that what a dead run left can be reclaimed by the next."""
    machine = for_uri(uri)
    conn = api.connect(uri)
    seqs: list[int] = []
    try:
        try:
            conn.lookupByName(spec.name)
            raise HarnessError(f"a domain named {spec.name} exists already at {uri}",
                               f"remove it with: vmharness vm down {spec.name.removeprefix(DOMAIN_PREFIX)}")
        except libvirt.libvirtError:
            pass
        with shielded():  # journaled and in `seqs` together (a signal in between would orphan the record)
            seqs.append(files.made(root, machine, spec.disk, owner))
        machine.run(["mkdir", "-p", str(Path(spec.disk).parent), str(Path(spec.console_log).parent)], timeout=30)
        machine.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base_disk, spec.disk],
                    timeout=60)
        with shielded():
            seqs.append(journal.record(root, {"op": OpKind.DOMAIN, "uri": uri, "uuid": spec.uuid,
                                              "name": spec.name}, owner)["seq"])
        dom = _define(conn, xml)
        say(f"defined {spec.name} ({'KVM' if spec.kvm else 'TCG: no usable KVM'}); starting")
        _start(dom, spec, machine)
        with Progress(f"{spec.name} booting", None):
            seconds = _wait_for_agent(dom, spec.console_log, machine, boot_timeout)
        say(f"guest agent answers after {seconds:.1f} s")
        link = None
        if spec.link is not None and link_net is not None:
            with said_if_it_stops(dom, spec.console_log, machine, "after its agent answered"):
                _link_up(dom, spec, machine, link_net)
            link = {"tap": spec.link.tap, "host": link_net[0], "guest": link_net[1]}
            say(f"link {spec.link.tap}: host {link_net[0]}, guest {link_net[1]}")
        guest = Guest(spec.name.removeprefix(DOMAIN_PREFIX), uri, spec.uuid, spec.disk, spec.console_log,
                      spec.kvm, tuple(seqs), link, round(seconds, 1))
        save(root, guest)
        return guest
    except BaseException:
        _give_back(root, uri, spec.uuid, spec.disk, machine, seqs)
        raise
    finally:
        conn.close()


def _define(conn: libvirt.virConnect, xml: str) -> libvirt.virDomain:
    try:
        return conn.defineXML(xml)
    except libvirt.libvirtError as exc:
        raise HarnessError(f"libvirt refused the domain: {str(exc).strip()}",
                           "see the XML with --print-xml") from exc


def _start(dom: libvirt.virDomain, spec: DomainSpec, machine: Machine) -> None:
    try:
        dom.create()
    except libvirt.libvirtError as exc:
        detail = str(exc).strip().splitlines()[-1]
        raise HarnessError(f"the guest did not start: {detail}",
                           "the console log may say more: " + spec.console_log) from exc


def _give_back(root: HostRoot, uri: str, dom_uuid: str, overlay: str, machine: Machine, seqs: list[int]) -> None:
    """Remove the domain and the overlay (whatever of them exists) and release their records."""
    if not seqs:
        return
    with shielded():
        api.remove(uri, dom_uuid)
        files.remove(machine, overlay)
        tuned = [r["seq"] for r in journal.outstanding(journal.read(root)) if r["op"] == "tune"
                 and r["target"].get("uuid") == dom_uuid]  # its settings went with it
        journal.release(root, seqs + tuned)


def down(root: HostRoot, guest: Guest, say: Say, grace: float = 60) -> None:
    """Shut the guest down (destroyed after `grace` seconds; at once with 0), undefine it, remove its
    overlay. A signal meanwhile waits until the guest is gone."""
    with shielded():
        conn = api.connect(guest.uri)
        try:
            dom = api.lookup(conn, guest.uuid)
            if dom is not None:
                clean = api.stop(dom, grace)
                say("shut down" if clean else "powered off" if grace <= 0 else
                    f"did not shut down within {grace:g} s: destroyed")
        finally:
            conn.close()
        _give_back(root, guest.uri, guest.uuid, guest.overlay, guest.machine, list(guest.seqs))
        forget(root, guest.name)
        say(f"undefined {domain_name(guest.name)}, removed {guest.overlay}")


# The journal's ops for guests ------------------------------------------------------------------
def _describe_domain(rec: dict[str, Any]) -> str:
    return f"guest {rec['name']} ({rec['uri']}): destroy and undefine"


def _undo_domain(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    """Found by its UUID only (never by a name another domain could have)."""
    api.remove(rec["uri"], rec["uuid"])
    forget(root, rec["name"].removeprefix(DOMAIN_PREFIX), rec["uuid"])
    return []


journal.register(OpKind.DOMAIN, Op(_describe_domain, _undo_domain, ("uri", "uuid", "name")))
