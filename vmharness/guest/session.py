"""One guest of a `vmharness run`: booted for an instance (its kernel, cmdline and image) with the
run's [guest] settings, reachable over ssh on its management link, the benchmark NIC addressed
(the passed-through one, or the link itself), and its facts read; shut down afterwards. Any failure
after the boot takes the guest down again before the error goes up."""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vmharness import cpus, progress
from vmharness.errors import HarnessError
from vmharness.guest import agent, domain, instance, placement, provenance, running, ssh, stopped, vm
from vmharness.guest.record import Guest
from vmharness.host.prepare import irqs, knobs
from vmharness.journal import journal
from vmharness.model.sections import InstanceSection, RunConfig
from vmharness.system.machine import Machine, for_uri
from vmharness.system.root import HostRoot

STATE_DIR = f"{instance.VM_DIR}/_run"  # the overlay and console log of a run's guest (one at a time: the
# run holds the host lock; a name `vm up` cannot take)

# The guest's NICs that are not virtio: the passed-through ones, in PCI order.
AGENT_TIMEOUT = 60.0  # seconds for one command through the agent while the guest is set up (under KVM)
# Seconds (times the agent's patience) for vfio-pci's host IRQs of the passed-through NICs to appear:
# QEMU asks for each when the guest unmasks its vector, which the guest's driver did when the NIC was
# brought up, before the guest was tuned; so they are normally there at the first look.
IRQ_WAIT = 15.0

_PASSED = r"""
for d in /sys/class/net/*; do
    [ -e "$d/device/driver" ] || continue
    drv=$(basename "$(readlink -f "$d/device/driver")")
    [ "$drv" = virtio_net ] || echo "$(basename "$(readlink -f "$d/device")") ${d##*/} $drv"
done | sort
"""


@dataclass
class Booted:
    guest: Guest
    machine: Machine
    address: str  # where wrk connects
    iface: str  # the guest's interface that carries the benchmark
    facts: dict[str, Any]
    xml: str  # the domain as defined
    pinning: dict[str, Any]  # planned and found CPUs of the vCPU and emulator threads
    placement: domain.Placement  # the plan itself: the node, the vCPUs' and the emulator's CPUs
    knobs: knobs.Applied | None = None  # the host knobs set for it, given back by `shutdown`
    emulator: str = ""  # the binary its QEMU process runs, as the host's /proc/PID/exe names it ("": not found)


def guest_name(owner: str) -> str:
    """A run's guest is named for the run (domain vmh-rID): a domain a dead run left never blocks a
    later run, which reclaims it by its owner tag."""
    return "r" + owner.removeprefix(journal.RUN_PREFIX)


def qemu_of(cfg: RunConfig, inst: InstanceSection) -> str:
    """The QEMU binary `inst`'s guest runs: its own, else [guest]'s; "" for the one libvirt finds."""
    return inst.qemu or cfg.guest.qemu


def request(cfg: RunConfig, inst: InstanceSection, owner: str, default_image: str | None = None
            ) -> instance.VmRequest:
    g = cfg.guest
    cmdline = instance.with_init(g.init, inst.cmdline)
    return instance.VmRequest(
        name=guest_name(owner), owner=owner, state_dir=STATE_DIR, memory_mib=g.memory, vcpus=g.vcpus or None,
        cmdline=cmdline, kernel=inst.kernel or None,
        initrd=inst.initrd or None, bdfs=g.bdf, managed=g.managed, hugepages=g.hugepages, hugepage_size=g.hugepage_size,
        uri=g.uri, accel=g.accel, link=True, image=inst.image or g.image or default_image,
        cpu_features=inst.cpu_features, qemu_args=inst.qemu_args, vcpu_cap=inst.vcpu_cap,
        qemu=qemu_of(cfg, inst) or None)


def _run(dom: Any, argv: list[str], timeout: float) -> str:
    res = agent.run(dom, argv, timeout=timeout)
    if not res.ok:
        raise res.failure("in the guest: ")
    return res.stdout


def _address_passed_nic(dom: Any, address: str, timeout: float) -> str:
    """Put the run's address on the first passed-through NIC (its driver may still be loading); each
    command, and the wait for the driver, within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        found = _run(dom, ["/bin/sh", "-c", _PASSED], timeout).split("\n")[0].split()
        if found or time.monotonic() > deadline:
            break
        time.sleep(1)
    if not found:
        raise HarnessError("the guest sees no passed-through NIC with a driver (every interface is virtio)",
                           "does the guest kernel have the NIC's driver? `vmharness vm console` shows its boot")
    _, iface, _ = found
    _run(dom, ["/sbin/ip", "addr", "add", address, "dev", iface], timeout)
    _run(dom, ["/sbin/ip", "link", "set", "dev", iface, "up"], timeout)
    return iface


def _iface_with(m: Machine, address: str) -> str:
    out = m.run(["ip", "-o", "-4", "addr", "show"], timeout=30).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1]
    raise HarnessError(f"no interface of the guest holds {address}", "see `ip addr` in the guest")


def pinning(planned: domain.Placement, threads: dict[str, str]) -> dict[str, Any]:
    """What the kernel lets the guest's QEMU threads run on against the plan; `ok` is False when a
    vCPU thread may run anywhere but its one CPU, or the emulator outside its CPUs."""
    vcpus = [next((cpus for name, cpus in threads.items() if name.startswith(f"CPU {i}/")), "")
             for i in range(len(planned.vcpu_cpus))]
    emulator = threads.get("emulator", "")
    ok = (all(cpus.parse_cpulist(found) == (cpu,) for found, cpu in zip(vcpus, planned.vcpu_cpus, strict=True))
          and bool(emulator) and set(cpus.parse_cpulist(emulator)) <= set(planned.emulator_cpus)
          ) if threads else None
    return {"ok": ok, "vcpus": vcpus, "emulator": emulator, "planned_vcpus": list(planned.vcpu_cpus),
            "planned_emulator": list(planned.emulator_cpus)}


def boot(root: HostRoot, cfg: RunConfig, inst: InstanceSection, default_image: str | None, say: progress.Say,
         owner: str) -> Booted:
    """Boot the guest for `inst`, once its host knobs are set; the caller holds the host lock and calls
    `shutdown` afterwards (a failure gives the knobs back before the error goes up)."""
    applied = knobs.apply(root, inst.name, inst.host, owner, say, inst.kvm_modules)
    try:
        b = _boot(root, cfg, inst, default_image, say, owner, applied)
    except BaseException:
        for problem in knobs.give_back(root, applied, say):
            say(f"NOT RESTORED: {problem}")
        raise
    b.knobs = applied
    return b


def _boot(root: HostRoot, cfg: RunConfig, inst: InstanceSection, default_image: str | None, say: progress.Say,
          owner: str, applied: knobs.Applied) -> Booted:
    planned = instance.plan(root, request(cfg, inst, owner, default_image))
    knobs.check_placement(inst.name, applied, (*planned.spec.placement.vcpu_cpus,
                                               *planned.spec.placement.emulator_cpus))
    for note in planned.notes:
        say(f"note: {note}")
    xml = domain.to_xml(planned.spec)
    guest = vm.up(root, planned.spec, cfg.guest.uri, planned.base_disk, xml, say, owner,
                  boot_timeout=cfg.guest.boot_timeout, link_net=planned.link_net)
    reached: Machine | None = None  # whose shared ssh connection to close
    try:
        assert guest.link is not None
        conn, dom = running.domain(guest)
        try:
            # everything up to the Booted: a guest lost on the way, however its step failed, is said as lost
            with stopped.said_if_it_stops(dom, guest.console_log, guest.machine, "after its agent answered"):
                timeout = AGENT_TIMEOUT * agent.patience(guest.kvm)
                iface = _address_passed_nic(dom, cfg.guest.address, timeout) if cfg.guest.bdf else ""
                m = ssh.machine(guest.link["guest"].split("/")[0], guest.uri, guest.kvm)
                exe = emulator_check(cfg, inst, running.emulator(guest))
                reached = m  # a try may have started its master
                waited = ssh.wait(m, cfg.guest.boot_timeout, still=lambda: stopped.runs(dom))
                say(f"ssh into the guest works ({waited:.1f} s after the agent)")
                if cfg.guest.bdf:
                    address = str(ipaddress.IPv4Interface(cfg.guest.address).ip)
                else:
                    address = guest.link["guest"].split("/")[0]
                    iface = _iface_with(m, address)
                return Booted(guest, m, address, iface, provenance.facts(m), xml,
                              pinning(planned.spec.placement, running.affinity(guest)), planned.spec.placement,
                              emulator=exe)
        finally:
            conn.close()
    except BaseException:
        shutdown(root, guest, reached, cfg, say)
        raise


def emulator_check(cfg: RunConfig, inst: InstanceSection, exe: str) -> str:
    """`exe`, the binary the guest's QEMU process runs, once it is the file the instance names (the
    preflight checked that one: host/inspect/qemu_binary.py); a guest started by another is refused."""
    named = qemu_of(cfg, inst)
    if named and exe != os.path.realpath(named):
        raise HarnessError(f"instance {inst.name}: its guest's QEMU process runs {exe or 'a binary not found'}, "
                           f"not {named}", "look at the domain's <emulator> (vmharness run --print-xml)")
    return exe


def shutdown(root: HostRoot, guest: Guest, m: Machine | None, cfg: RunConfig, say: progress.Say,
             applied: knobs.Applied | None = None) -> None:
    """Stop the guest, then give back the host knobs set for it (`applied`)."""
    try:
        if m is not None:
            ssh.close(m)
        vm.down(root, guest, say, grace=cfg.guest.shutdown_grace)
    finally:
        for problem in knobs.give_back(root, applied, say):
            say(f"NOT RESTORED: {problem}")


@contextmanager
def host_irqs(root: HostRoot, cfg: RunConfig, b: Booted, say: progress.Say, owner: str,
              wanted: bool) -> Iterator[dict[str, Any]]:
    """For the block: the host interrupts of the passed-through NICs on their node's CPUs that hold
    no vCPU (placement.irq_cpus), journaled, and given back after it, before the guest goes. Yields
    what goes into the session record; `note` says what was left alone and why (the caller says it
    once a run: it is the same for every boot)."""
    g = cfg.guest
    if not g.bdf or not wanted:
        yield {"note": "no NIC passed through" if not g.bdf else "left alone: the profile keeps them "
               "(vfio_irqs = keep)"}
        return
    if not for_uri(g.uri).local:
        yield {"note": f"the guest runs at {g.uri}: its NIC's host interrupts are there, and left alone"}
        return
    timeout = IRQ_WAIT * agent.patience(b.guest.kvm)
    found = irqs.wait(root, g.bdf, timeout)
    where, why = placement.irq_cpus(placement.node_cpus(root, b.placement.node), b.placement)
    report: dict[str, Any] = {"cpus": list(where), "why": why,
                              "irqs": [{"irq": i.number, "name": i.name, "before": None, "after": None}
                                       for i in found]}
    if not found or not where:
        report["note"] = (f"{why}: the host interrupts of {', '.join(g.bdf)} stay where they are" if found else
                          f"vfio-pci holds no MSI or MSI-X interrupt of {', '.join(g.bdf)} on this host "
                          f"{timeout:g} s after the guest brought it up: nothing to move")
        yield report
        return
    made: list[journal.Record] = []
    try:
        try:
            made, report["irqs"] = irqs.pin(root, found, where, owner)
            say(f"host interrupts of {', '.join(g.bdf)} (IRQ {', '.join(str(i.number) for i in found)}) on "
                f"CPUs {cpus.format_cpulist(where)}: {why}")
        except HarnessError as exc:
            report["error"] = exc.message
            say(f"WARNING: the host interrupts of {', '.join(g.bdf)} stay where they are: {exc.message}")
        yield report
    finally:
        for problem in irqs.give_back(root, made, say):
            say(f"NOT RESTORED: {problem}")
