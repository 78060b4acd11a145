"""A guest's life: define, start, wait for the agent, run commands, shut down, undefine.

Every boot runs on a fresh copy-on-write overlay of the image (the image itself is never written).
The overlay and the domain are journaled before they exist, with their owner (`vm:NAME` for `vm up`,
a run's id for its guests), and `up` undoes both on any failure, Ctrl-C, SIGTERM or SIGHUP; a
harness that dies outright leaves them to the next run (a run's) or to `host-restore`. The journal's
`domain` op is registered here: guests own their undo (the overlay is a host.files `file`). The
caller holds the host lock (journal.Lock) around `up` and `down`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import libvirt

from vmharness.errors import HarnessError
from vmharness.guest import agent, ssh
from vmharness.guest.domain import CAP_PERIOD_US, DomainSpec, cap_quota
from vmharness.host.libvirt import api
from vmharness.journal import files, journal
from vmharness.journal.journal import Op
from vmharness.journal.kinds import OpKind
from vmharness.progress import Progress, Say
from vmharness.signals import shielded
from vmharness.system.machine import Machine, for_uri
from vmharness.system.root import HostRoot

DOMAIN_PREFIX = "vmh-"
STATE = "/run/vmharness/vms"  # name.json per running guest, on the machine running the harness


@dataclass(frozen=True)
class Guest:
    """What the harness keeps about a running guest; enough to find it again from another command."""

    name: str
    uri: str
    uuid: str
    overlay: str
    console_log: str
    kvm: bool
    seqs: tuple[int, ...]  # its journal records
    link: dict[str, str] | None = None  # host and guest addresses of the management link
    boot_seconds: float = 0.0

    @property
    def machine(self) -> Machine:
        return for_uri(self.uri)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_name(name: str) -> None:
    """A guest's name makes its domain (vmh-NAME), its tap (15 characters at most) and file names."""
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,10}", name):
        raise HarnessError(f"guest name {name!r} (--name) is not allowed",
                           "use 1 to 11 lower-case letters, digits or dashes, starting with a letter")


def domain_name(name: str) -> str:
    return DOMAIN_PREFIX + name


def _state_file(root: HostRoot, name: str) -> Path:
    return root.path(f"{STATE}/{name}.json")


def load(root: HostRoot, name: str) -> Guest:
    check_name(name)
    path = _state_file(root, name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise HarnessError(f"no guest named {name} is up", "start one with: vmharness vm up --name "
                           f"{name}") from exc
    except (ValueError, RecursionError, OSError) as exc:
        raise HarnessError(f"{path} is damaged: {exc}", "remove it once the guest is gone (virsh list --all)") from exc
    data["seqs"] = tuple(data["seqs"])
    return Guest(**data)


def domain(guest: Guest) -> tuple[libvirt.virConnect, libvirt.virDomain]:
    conn = api.connect(guest.uri)
    dom = api.lookup(conn, guest.uuid)
    if dom is None or not dom.isActive():
        conn.close()
        raise HarnessError(f"guest {guest.name} is not running any more",
                           f"look at its console log {guest.console_log}; clean up with: vmharness vm down "
                           f"{guest.name}")
    return conn, dom


def vcpu_seconds(guest: Guest) -> list[float]:
    """The CPU time each of the guest's vCPU threads has used, in seconds, as the host's kernel counts
    it (libvirt reads each thread's runtime): the guest's own busy time counts time its vCPU waited
    (for QEMU's I/O thread, or stolen by another task), this does not."""
    conn, dom = domain(guest)
    try:
        return [float(t[2]) / 1e9 for t in dom.vcpus()[0]]
    finally:
        conn.close()


def cap_vcpus(guest: Guest, percent: int) -> None:
    """Cap each vCPU thread of the running guest to `percent` of a CPU (0: no cap), as <cputune>'s
    period and quota do at definition: the kernel's CFS bandwidth control, through libvirt's cgroups."""
    conn, dom = domain(guest)
    try:
        quota = cap_quota(percent) if percent else -1
        dom.setSchedulerParametersFlags({"vcpu_period": CAP_PERIOD_US, "vcpu_quota": quota},
                                        libvirt.VIR_DOMAIN_AFFECT_LIVE)
    except libvirt.libvirtError as exc:
        raise HarnessError(f"cannot cap {guest.name}'s vCPUs to {percent}%: {exc.get_error_message()}",
                           "libvirt needs the cpu cgroup controller for this (`cat /proc/cgroups`)") from exc
    finally:
        conn.close()


def console_tail(guest_or_log: Guest | str, machine: Machine | None = None, lines: int = 20) -> str:
    path = guest_or_log.console_log if isinstance(guest_or_log, Guest) else guest_or_log
    where = guest_or_log.machine if isinstance(guest_or_log, Guest) else machine or Machine()
    res = where.run(["tail", "-n", str(lines), path], timeout=30, check=False)
    return res.stdout.replace("\r", "") if res.ok else ""


def _wait_for_agent(dom: libvirt.virDomain, log: str, machine: Machine, timeout: float) -> float:
    started = time.monotonic()
    looked = started
    while time.monotonic() - started < timeout:
        if not dom.isActive():
            raise HarnessError("the guest stopped while booting; its console ends with:\n"
                               + _indent(console_tail(log, machine)),
                               "check the kernel and cmdline; the whole console log is " + log)
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


# The CPUs each thread of the guest's QEMU may run on, as the kernel has them (libvirt names vCPU
# threads "CPU N/KVM" or "CPU N/TCG"). One process on the guest's machine.
_AFFINITY = r"""
{ read -r pid || [ -n "$pid" ]; } 2>/dev/null < "/run/libvirt/qemu/$1.pid" || exit 0  # no newline in it
allowed() { while read -r key value; do [ "$key" = Cpus_allowed_list: ] && echo "$value $2"; done < "$1"; }
allowed "/proc/$pid/status" emulator
for t in /proc/$pid/task/*; do read -r name < "$t/comm" && allowed "$t/status" "$name"; done 2>/dev/null
"""


def affinity(guest: Guest) -> dict[str, str]:
    """Thread name -> allowed CPU list of the guest's QEMU, its main thread as "emulator" (empty: its
    process was not found)."""
    res = guest.machine.run(["sh", "-c", _AFFINITY, "sh", domain_name(guest.name)], timeout=30, check=False)
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        cpus, _, name = line.partition(" ")
        out.setdefault(name, cpus)
    return out


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
    for argv in (["ip", "addr", "add", guest_addr, "dev", ifname], ["ip", "link", "set", "dev", ifname, "up"]):
        res = agent.run(guest_dom, ["/sbin/" + argv[0], *argv[1:]], timeout=30 * agent.patience(spec.kvm))
        if not res.ok:
            raise HarnessError(f"in the guest, {' '.join(argv)} failed: {res.stderr.strip()}", "see the console log")
    ssh.listen(guest_dom, guest_addr.split("/")[0], timeout=30 * agent.patience(spec.kvm))


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
            _link_up(dom, spec, machine, link_net)
            link = {"tap": spec.link.tap, "host": link_net[0], "guest": link_net[1]}
            say(f"link {spec.link.tap}: host {link_net[0]}, guest {link_net[1]}")
        guest = Guest(spec.name.removeprefix(DOMAIN_PREFIX), uri, spec.uuid, spec.disk, spec.console_log,
                      spec.kvm, tuple(seqs), link, round(seconds, 1))
        _save(root, guest)
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


def _save(root: HostRoot, guest: Guest) -> None:
    root.mkdir(STATE, mode=0o700)
    root.writable(f"{STATE}/{guest.name}.json").write_text(json.dumps(guest.to_json(), indent=2, sort_keys=True)
                                                           + "\n")


def _give_back(root: HostRoot, uri: str, dom_uuid: str, overlay: str, machine: Machine, seqs: list[int]) -> None:
    """Remove the domain and the overlay (whatever of them exists) and release their records."""
    if not seqs:
        return
    with shielded():
        api.remove(uri, dom_uuid)
        files.remove(machine, overlay)
        tuned = [r["seq"] for r in journal.outstanding(journal.read(root)) if r["op"] == OpKind.TUNE
                 and r["target"].get("uuid") == dom_uuid]  # its settings went with it
        journal.release(root, seqs + tuned)


def down(root: HostRoot, guest: Guest, say: Say, grace: float = 60) -> None:
    """Shut the guest down (destroyed after `grace` seconds), undefine it, remove its overlay. A
    signal meanwhile waits until the guest is gone."""
    with shielded():
        conn = api.connect(guest.uri)
        try:
            dom = api.lookup(conn, guest.uuid)
            if dom is not None:
                clean = api.stop(dom, grace)
                say("shut down" if clean else f"did not shut down within {grace:g} s: destroyed")
        finally:
            conn.close()
        _give_back(root, guest.uri, guest.uuid, guest.overlay, guest.machine, list(guest.seqs))
        _forget(root, guest.name)
        say(f"undefined {domain_name(guest.name)}, removed {guest.overlay}")


def _forget(root: HostRoot, name: str, dom_uuid: str | None = None) -> None:
    """Drop the note `up` keeps about a guest (only if it is about that domain, when given)."""
    note = f"{STATE}/{name}.json"
    text = root.read_optional(note)
    if text is not None and (dom_uuid is None or f'"{dom_uuid}"' in text):
        root.remove(note)


# The journal's ops for guests ------------------------------------------------------------------
def _describe_domain(rec: dict[str, Any]) -> str:
    return f"guest {rec['name']} ({rec['uri']}): destroy and undefine"


def _undo_domain(root: HostRoot, rec: dict[str, Any]) -> list[str]:
    """Found by its UUID only (never by a name another domain could have)."""
    api.remove(rec["uri"], rec["uuid"])
    _forget(root, rec["name"].removeprefix(DOMAIN_PREFIX), rec["uuid"])
    return []


journal.register(OpKind.DOMAIN, Op(_describe_domain, _undo_domain, ("uri", "uuid", "name")))



def new_uuid() -> str:
    return str(uuid.uuid4())
