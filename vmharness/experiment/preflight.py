"""What a run decides before it boots anything, read from a host (the live one or a host root) and
changing nothing: its configuration (the file or the embedded experiment, the flags on top, each
checked by the flag's name), where its NICs and hugepages come from, the host plan it would carry out,
and each instance's domain as it would be defined once that plan is done. `vmharness run` decides its
configuration here; `run --print-xml` prints all of it and stops."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness.bench import bench
from vmharness.cpus import format_cpulist
from vmharness.errors import HarnessError
from vmharness.experiment import hostprep
from vmharness.experiment.hostboots import target
from vmharness.guest import domain, instance, session
from vmharness.host.prepare import knobs, plan
from vmharness.journal import journal
from vmharness.model import config, derived, rules, sections, wire
from vmharness.model.bdf import parse_bdf
from vmharness.model.hostknobs import SMT
from vmharness.system.root import HostRoot


@dataclass(frozen=True)
class Flags:
    """What `vmharness run` was given on its command line (each None, empty or False when not given)."""

    config: Path | None = None
    bdf: tuple[str, ...] = ()
    hugepages: bool = False
    address: str | None = None
    client_address: str | None = None
    control: bool = False


def _flag_address(value: str | None, flag: str) -> str | None:
    if value is not None and not value:
        raise HarnessError(f"{flag} is empty", f"write an address with its prefix, e.g. {wire.DEFAULT_ADDRESS}")
    return None if value is None else wire.check_address(value, flag)


def choose(root: HostRoot, flags: Flags) -> hostprep.Choice:
    """The configuration file (or the embedded experiment) with the flags on top, and where its NIC and
    hugepages come from (the flags, the file, or what host-prepare set up); each flag checked by name."""
    cfg = config.load_run(flags.config)
    guest = cfg.guest
    if flags.bdf:
        guest = dataclasses.replace(guest, bdf=tuple(parse_bdf(b, "--bdf") for b in flags.bdf))
    if flags.hugepages:
        guest = dataclasses.replace(guest, hugepages=True)
    address = _flag_address(flags.address, "--address")
    client = _flag_address(flags.client_address, "--client-address")
    guest = dataclasses.replace(guest, address=guest.address if address is None else address,
                                client_address=guest.client_address if client is None else client)
    cfg = dataclasses.replace(cfg, guest=guest)
    if flags.control and not cfg.control.cap:
        cfg = derived.with_control(dataclasses.replace(cfg, control=dataclasses.replace(
            cfg.control, cap=sections.CONTROL_CAP)), "--control")
    given = hostprep.Given(bdf=bool(flags.bdf), address=address is not None, client_address=client is not None)
    choice = hostprep.choose(root, cfg, given)
    rules.validate(choice.cfg)
    knobs.check_all(root, choice.cfg.instance)  # each instance's host knobs, on this host, before any change
    target.named(root, choice.cfg)  # each host boot's kernel and initrd, on this machine
    return choice


def host_plan(root: HostRoot, cfg: sections.RunConfig) -> plan.Plan | None:
    """The plan the run would carry out on the host, as `host-prepare --dry-run` makes it (None: the
    run prepares nothing: no NIC to pass through, no hugepages)."""
    req = hostprep.request(cfg)
    return plan.make(root, req) if req is not None else None


@dataclass(frozen=True)
class Domain:
    """An instance's guest as the run would define it: its domain XML, and what planning it noticed."""

    instance: str
    xml: str
    notes: tuple[str, ...]
    knobs: str  # the host knobs it would set, checked on this host, in one line ("" when none)


def domains(root: HostRoot, cfg: sections.RunConfig, after: plan.Plan | None) -> Iterator[Domain]:
    """Each instance's domain, in order, as it would be defined once `after` is carried out and its own
    host knobs are set: with `smt = "off"` its vCPUs and QEMU's threads are placed on the CPUs SMT off
    leaves, as the run places them once it is off (one at a time, so that what is shown of the first
    stands before an error in the next)."""
    owner = journal.RUN_PREFIX + bench.new_id()
    for inst in cfg.instance:
        offline = knobs.taken_by_smt_off(root) if inst.host.get(SMT) == "off" else ()
        said = f"host.smt = off takes CPUs {format_cpulist(offline)} offline before its guest boots" if offline else ""
        try:
            planned = instance.plan(root, session.request(cfg, inst, owner), for_print=True, after=after,
                                    offline=offline)
        except HarnessError as exc:
            if said:
                raise HarnessError(f"instance {inst.name}: {said}, and then: {exc.message}", exc.hint) from None
            raise
        notes = (*planned.notes, f"{said}: the guest is placed on the CPUs left") if said else planned.notes
        yield Domain(inst.name, domain.to_xml(planned.spec), notes, knobs.preview(root, inst.name, inst.host,
                                                                                  inst.kvm_modules))


def resumed(root: HostRoot, saved: dict[str, Any]) -> hostprep.Choice:
    """A resumed run's choice: its own configuration (`saved`, from its manifest), checked again, and
    nothing new taken from the host."""
    choice = hostprep.choose(root, rules.validate(config.run_from_json(saved)), hostprep.Given(resumed=True))
    knobs.check_all(root, choice.cfg.instance)
    target.named(root, choice.cfg)
    return choice
