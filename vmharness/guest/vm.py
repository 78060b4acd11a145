"""A guest's life: define, start, wait for the agent, shut down, undefine.

Every boot runs on a fresh copy-on-write overlay of the image (the image itself is never written).
The overlay and the domain are journaled before they exist, with their owner (`vm:NAME` for `vm up`,
a run's id for its guests), and `up` undoes both on any failure, Ctrl-C, SIGTERM or SIGHUP; a
harness that dies outright leaves them to the next run (a run's) or to `host-restore`. The journal's
`domain` op is registered here, beside the code that makes the change: guests own their undo (the
overlay is a journal.files `file`). The caller holds the host lock (journal.Lock) around `up` and
`down`. What is kept about a running guest is record.py's; asking it things is running.py's; what is
said of one that stopped or halted, stopped.py's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import libvirt

from vmharness.errors import HarnessError
from vmharness.guest import agent, ssh, stopped
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

LOOK_S = 5.0  # seconds between looks at a booting guest's state and console
NIC_WAIT_S = 10.0  # seconds (times agent.patience) for the link's interface to appear once the agent answers


def _wait_for_agent(dom: libvirt.virDomain, log: str, machine: Machine, timeout: float) -> float:
    started = time.monotonic()
    looked = started
    while time.monotonic() - started < timeout:
        if not dom.isActive():
            raise stopped.stopped(dom, log, machine, "while booting")
        if agent.ping(dom, timeout=3):
            return time.monotonic() - started
        if time.monotonic() - looked > LOOK_S:  # a panicked or halted guest stays up: look now and then
            looked = time.monotonic()
            if (why := stopped.halted(dom)) is not None:
                raise stopped.halted_error(dom, log, machine, "while booting", why)
            tail = console_tail(log, machine, lines=60)
            if "Kernel panic - not syncing" in tail:
                raise HarnessError("the guest kernel panicked while booting; its console ends with:\n"
                                   + stopped.indent(tail[tail.index("Kernel panic"):]),
                                   "check the kernel, its cmdline (root=, init=) and its drivers; the whole "
                                   "console log is " + log)
        time.sleep(0.2)  # the agent answers a fraction of a second after it starts
    raise HarnessError(f"the guest agent did not answer within {timeout:g} s; the console ends with:\n"
                       + stopped.indent(console_tail(log, machine)),
                       "raise --boot-timeout (TCG boots take tens of seconds), or check the console log " + log)


def _link_up(guest_dom: libvirt.virDomain, spec: DomainSpec, machine: Machine, net: tuple[str, str],
             deadline: float) -> None:
    """Address both ends of the management link (the host's tap and the guest's virtio-net), then start
    sshd in the guest on its end alone; each step in the guest within its own limit and before `deadline`
    (time.monotonic's), the boot's."""
    assert spec.link is not None
    host_addr, guest_addr = net
    machine.run(["ip", "addr", "add", host_addr, "dev", spec.link.tap], timeout=10)
    machine.run(["ip", "link", "set", "dev", spec.link.tap, "up"], timeout=10)
    ifname = _interface(guest_dom, spec.link.mac, _left(NIC_WAIT_S * agent.patience(spec.kvm), deadline))
    ssh.listen(guest_dom, guest_addr, ifname, timeout=_left(30 * agent.patience(spec.kvm), deadline))


def _left(limit: float, deadline: float) -> float:
    """`limit` seconds, or what is left before `deadline` where that is less; a boot out of time is an error."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise HarnessError("the guest's agent answered, but its boot timeout ran out before its link was up",
                           "raise --boot-timeout (TCG boots take tens of seconds)")
    return min(limit, left)


def _interface(dom: libvirt.virDomain, mac: str, timeout: float) -> str:
    """The name of the guest's interface with `mac`. The agent can answer before the guest's udev has
    probed virtio_net (two events of the same coldplug, handled by parallel workers in no set order), so
    the interface is looked for until `timeout`, not once."""
    started = time.monotonic()
    while True:
        seen = agent.interfaces(dom)
        if mac in seen:
            return seen[mac]
        if time.monotonic() - started >= timeout:
            break
        time.sleep(0.5)
    others = ", ".join(f"{name} ({addr})" for addr, name in sorted(seen.items())) or "none"
    raise HarnessError(f"the guest has no interface with MAC {mac} after {timeout:g} s (it has: {others})",
                       "is virtio_net in its kernel or its initramfs?")


def up(root: HostRoot, spec: DomainSpec, uri: str, base_disk: str, xml: str, say: Say, owner: str,
       boot_timeout: float = 300, link_net: tuple[str, str] | None = None) -> Guest:
    """Boot the guest `spec` describes (its overlay over `base_disk`) and wait for its agent, then bring up
    its link (`link_net`), all within `boot_timeout` seconds. `owner` goes into its journal records, so
    that what a dead run left can be reclaimed by the next."""
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
        started = time.monotonic()  # the agent, then the link, within boot_timeout: `up` gives up about then
        with Progress(f"{spec.name} booting", None):
            seconds = _wait_for_agent(dom, spec.console_log, machine, boot_timeout)
        say(f"guest agent answers after {seconds:.1f} s")
        link = None
        if spec.link is not None and link_net is not None:
            with stopped.said_if_it_stops(dom, spec.console_log, machine, "after its agent answered"):
                _link_up(dom, spec, machine, link_net, started + boot_timeout)
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
