"""The mitigation switches of an attribution study ([study] in run's configuration): which of the guest
kernel's mitigations make up its cost. The first instance is the reference with every mitigation on (its
cmdline as written: the kernel's defaults, or a switch forced on, as `pti=on` where the CPU is not
affected). For a set S of switches turned off, an instance's cmdline is the reference's with every word
that sets one of S's parameters taken out and S's own off words appended. The study is then:

- `no-X` for each switch X (S = {X}: leave one out): the marginal cost of X is all-on against it;
- `all-off` (S = every switch; with two or more): the total, against which the marginal costs and their
  interaction are read (analysis/attribution.py);
- with one_on, `only-X` (S = every switch but X): X alone, at the reference's setting, from all off.

Every switch is turned off by its own parameter rather than by `mitigations=off`: a switch's off word
replaces the reference's word for it wherever it stands, and `only-X` keeps the reference's X while the
others are off (`mitigations=off` overrides some per-vulnerability words: it would not leave X on). The
switches and their words are the kernel's (Documentation/admin-guide/kernel-parameters.txt);
model/derived.py makes the instances.

Two switches are the hypervisor's, not the guest kernel's, and leave the cmdline as it is: `qemu`, where
the reference runs its own QEMU (its `qemu`, or [guest]'s: a patched build, say) and an instance with it
off runs `study.qemu_off` (the stock one); and `kvm_modules`, where the reference loads its own KVM
modules (its `kvm_modules`: a patched KVM) and an instance with it off runs on the host's stock ones.
`all` means the kernel's switches only.

The attack-vector controls are switches too where the kernel has them (model/vectors.py): the guest's
`user_kernel`, `user_user`, `cross_thread`, turned off together in one word `mitigations=auto,no_...`
(so a reference with a mitigations= word of its own is refused: the study would replace it). A switch
may also be the host's (study.host_switches: model/hoststudy.py): the per-vulnerability switches above
and the host's vectors `guest_host`, `guest_guest`, turned off by the same words on the host's command
line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.model import kernel_cmdline, vectors


@dataclass(frozen=True)
class Switch:
    off: str  # the word that turns it off
    keys: tuple[str, ...]  # the parameters (before any '=') whose words it replaces


def _sw(param: str, *more: str) -> Switch:
    return Switch(f"{param}=off", (param, *more))


# name -> how it is turned off; the name is the kernel's parameter (nospectre_v1's: the vulnerability's)
SWITCHES: dict[str, Switch] = {
    "pti": _sw("pti", "nopti"),
    "spectre_v1": Switch("nospectre_v1", ("nospectre_v1",)),
    "spectre_v2": _sw("spectre_v2", "nospectre_v2"),
    "spectre_v2_user": _sw("spectre_v2_user"),
    "spectre_bhi": _sw("spectre_bhi"),
    "spec_store_bypass_disable": _sw("spec_store_bypass_disable", "nospec_store_bypass_disable"),
    "mds": _sw("mds"),
    "tsx_async_abort": _sw("tsx_async_abort"),
    "mmio_stale_data": _sw("mmio_stale_data"),
    "retbleed": _sw("retbleed"),
    "spec_rstack_overflow": _sw("spec_rstack_overflow"),
    "gather_data_sampling": _sw("gather_data_sampling"),
    "reg_file_data_sampling": _sw("reg_file_data_sampling"),
    "l1tf": _sw("l1tf"),
    "srbds": _sw("srbds"),
}
ALL_OFF = "all-off"
QEMU = "qemu"  # the hypervisor's switch: the reference's QEMU, or study.qemu_off
KVM_MODULES = "kvm_modules"  # the hypervisor's switch: the reference's KVM modules, or the stock ones
HYPERVISOR = (QEMU, KVM_MODULES)


EVERY = "all"  # in study.switches: every switch above; those that change nothing are dropped at one boot


def check_switch(value: str, where: str) -> str:
    if value not in SWITCHES and value not in (EVERY, *HYPERVISOR, *vectors.GUEST):
        raise HarnessError(f"{where} {value[:80]!r} is not a mitigation switch vmharness knows",
                           f"one of: {', '.join(SWITCHES)}, {', '.join(vectors.GUEST)} (attack vectors, Linux 6.17+), "
                           f"{QEMU} (study.qemu_off against the reference's QEMU), "
                           f"{KVM_MODULES} (the reference's KVM modules against the stock ones), "
                           "or all; or write the instance by hand ([[instance]])")
    return value


def check_host_switch(value: str, where: str) -> str:
    """A switch of the host's command line: a per-vulnerability one, or a host attack vector."""
    if value not in SWITCHES and value not in vectors.HOST:
        raise HarnessError(f"{where} {value[:80]!r} is not a host mitigation switch vmharness knows",
                           f"one of: {', '.join(SWITCHES)}, {', '.join(vectors.HOST)} (attack vectors, Linux 6.17+); "
                           "or write the [[host_boot]] by hand")
    return value


def check_distinct(names: Sequence[str], where: str) -> tuple[str, ...]:
    """Each switch once, and `all` alone: a switch named twice would be two instances of one name."""
    names = tuple(names)
    if twice := next((n for i, n in enumerate(names) if n in names[:i]), None):
        raise HarnessError(f"{where} names the switch {twice[:40]!r} twice", "list each switch once")
    if EVERY in names and len(names) > 1:
        raise HarnessError(f"{where}: {EVERY!r} is every switch, and it is not alone",
                           f"write [{EVERY!r}] alone, or list the switches")
    return names


def _turns_off(switch: Switch, p: kernel_cmdline.Param) -> bool:
    off = kernel_cmdline.parse(switch.off).params[0]
    return (p.key, p.value) == (off.key, off.value) or (p.key.startswith("no") and p.value is None)


def check_reference(name: str, line: str, studied: Sequence[str], where: str = "study.switches") -> None:
    """The study's reference (the first instance, every mitigation on) must not turn off what the study
    switches, by mitigations=off or by a switch's own off word (the last word for a parameter is the
    one the kernel keeps), must not hold such a word the kernel's readers read two ways
    (model/kernel_cmdline.py), and must not leave a quote open (the off words appended after it would
    be read inside it): each would leave the study measuring something else than it says."""
    if line.count('"') % 2:
        raise HarnessError(f"{where}: the reference {name}'s cmdline leaves a double quote open: the kernel would "
                           "read the variants' off words inside it", "close the quote, or drop it")
    params = kernel_cmdline.parse(line).params
    mitigations = [p.value for p in params if p.key == "mitigations"]
    if mitigations and (studied_vectors := [s for s in studied if s in vectors.EVERY]):
        raise HarnessError(f"{where}: the reference {name} sets mitigations= in its cmdline, and the attack vectors "
                           f"({', '.join(studied_vectors)}) are turned off by a mitigations= word of their own",
                           "drop mitigations= from the reference's cmdline, or study the vectors apart")
    if mitigations and (mitigations[-1] or "").split(",")[0] == "off":
        raise HarnessError(f"{where}: the reference {name} turns every mitigation off (mitigations=off in its "
                           "cmdline)", "the first instance is the study's all-on: drop mitigations=off from it")
    for s in (s for s in studied if s in SWITCHES):  # the QEMU switch has no word in the cmdline
        last = [p for p in params if p.key in SWITCHES[s].keys][-1:]
        if last and _turns_off(SWITCHES[s], last[0]):
            raise HarnessError(f"{where}: the reference {name} already turns {s} off ({last[0].text} in its cmdline)",
                               f"the first instance is the study's all-on: drop {last[0].text} from its cmdline")
    keys = {k for sw in SWITCHES.values() for k in sw.keys}
    if word := kernel_cmdline.ambiguous(line, keys):
        raise HarnessError(f"{where}: the reference {name}'s cmdline word {word[:60]!r} is read two ways by the "
                           "kernel (quotes, '-' for '_', or after '--', around a mitigation's parameter)",
                           "write each mitigation's parameter plainly, e.g. pti=on, outside quotes and before '--'")


def cmdline(reference: str, off: list[str]) -> str:
    """The reference's cmdline with the switches in `off` turned off: each parameter of theirs taken out
    (as the kernel parses the line: a quoted word stays whole), their off words added before any `--`,
    the attack vectors' in one word. The hypervisor's switches change no word of it."""
    kernel = [name for name in off if name in SWITCHES]
    vectored = [name for name in off if name in vectors.EVERY]
    drop = {k for name in kernel for k in SWITCHES[name].keys}
    line = kernel_cmdline.parse(reference)
    kept = [p.text for p in line.params if p.key not in drop]
    return " ".join([*kept, *(SWITCHES[name].off for name in kernel), *([vectors.word(vectored)] if vectored else []),
                     *([line.rest] if line.rest else [])])
