"""The host's switches of an attribution study (study.host_switches): a mitigation of the host's kernel,
what guards the host and its guests from a guest, measured as the guest kernel's switches are
(model/switches.py). The reference host boot is the first instance's (its `host_boot`: the boot the run
started in, or a named [[host_boot]]); for each host switch X the study adds

- a host boot `host-no-X`: the reference host boot's kernel and initrd (none named: the running kernel,
  model/hostboots.py), its command line with X turned off by the word the guest's table has for X
  (`spectre_v2=off`; a host attack vector: `mitigations=auto,no_guest_host`), added to the running
  command line as the reference's is (cmdline_mode "add" for the boot the run started in);
- an instance `host-no-X`: the reference's guest in that host boot, so that the reference and it are
  paired round by round (experiment/hostboots/plan.py: round r is iteration r of every instance).

Only leave-one-out: each host boot costs a reboot every round. A switch named on both sides is
labelled with its side in the answer (`label`: host:spectre_v2, guest:spectre_v2)."""

from __future__ import annotations

import dataclasses

from vmharness.errors import HarnessError
from vmharness.model import switches as sw
from vmharness.model.hostboots import HostBootSection
from vmharness.model.sections import RunConfig

PREFIX = "host-no-"  # the host boot and the instance of a host switch turned off
HOST, GUEST, HYPERVISOR = "host", "guest", "hypervisor"


def name(switch: str) -> str:
    return f"{PREFIX}{switch}"


def label(host_switches: tuple[str, ...], guest_switches: tuple[str, ...], switch: str, on_host: bool) -> str:
    """How the answer names a switch: with its side where the study has it on both sides."""
    if switch in host_switches and switch in guest_switches:
        return f"{HOST if on_host else GUEST}:{switch}"
    return switch


def with_host_switches(cfg: RunConfig) -> RunConfig:
    """`cfg` with its host switches' host boots and instances (after the reference), if it has host
    switches and lacks them; a configuration that already holds them (a resumed run's) is returned as it is."""
    names = cfg.study.host_switches
    if not names:
        return cfg
    where = "study.host_switches"
    sw.check_distinct(names, where)
    ref = cfg.instance[0]
    base = next((b for b in cfg.host_boot if b.name == ref.host_boot), None)
    if ref.host_boot and base is None:
        raise HarnessError(f"{where}: the reference {ref.name}'s host_boot {ref.host_boot!r} names no [[host_boot]]",
                           "the host switches are turned off from the reference's host boot: name one that exists")
    if base is None:
        base = HostBootSection(name="-", kernel="")  # the boot the run started in: its kernel, its command line
    elif base.name.startswith(PREFIX):
        raise HarnessError(f"{where}: the reference {ref.name} runs under {base.name}, a host switch's own host boot",
                           f"name its host boots otherwise than {PREFIX}SWITCH, or run the reference elsewhere")
    sw.check_reference(f"host boot {base.name}" if ref.host_boot else "host boot", base.cmdline, names, where)
    boots = [dataclasses.replace(base, name=name(n), cmdline=sw.cmdline(base.cmdline, [n])) for n in names]
    guests = [dataclasses.replace(ref, name=name(n), host_boot=name(n)) for n in names]
    have_boots = {b.name: b for b in cfg.host_boot}
    have = {i.name: i for i in cfg.instance}
    if all(have_boots.get(b.name) == b for b in boots) and all(have.get(g.name) == g for g in guests):
        return cfg
    for taken, what in ((sorted(b.name for b in boots if b.name in have_boots), "a host boot"),
                        (sorted(g.name for g in guests if g.name in have), "an instance")):
        if taken:
            raise HarnessError(f"{where}: {what} is already named {taken[0]!r}",
                               f"rename it: the study names each host switch's {what.split(' ', 1)[1]} {PREFIX}SWITCH")
    return dataclasses.replace(cfg, host_boot=(*cfg.host_boot, *boots), instance=(ref, *guests, *cfg.instance[1:]))
