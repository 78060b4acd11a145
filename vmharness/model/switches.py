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

One switch is the hypervisor's, not the guest kernel's: `qemu`. The reference runs its own QEMU (its
`qemu`, or [guest]'s: a patched build, say), and an instance with `qemu` off runs `study.qemu_off` (the
stock one) instead; its cmdline is left as it is. `all` means the kernel's switches only."""

from __future__ import annotations

from dataclasses import dataclass

from vmharness.errors import HarnessError


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


EVERY = "all"  # in study.switches: every switch above; those that change nothing are dropped at one boot


def check_switch(value: str, where: str) -> str:
    if value not in SWITCHES and value not in (EVERY, QEMU):
        raise HarnessError(f"{where} {value[:80]!r} is not a mitigation switch vmharness knows",
                           f"one of: {', '.join(SWITCHES)}, {QEMU} (study.qemu_off against the reference's QEMU), "
                           "or all; or write the instance by hand ([[instance]])")
    return value


def _key(word: str) -> str:
    return word.split("=", 1)[0]


def cmdline(reference: str, off: list[str]) -> str:
    """The reference's cmdline with the switches in `off` turned off."""
    kernel = [name for name in off if name != QEMU]  # the QEMU switch changes no word of it
    drop = {k for name in kernel for k in SWITCHES[name].keys}
    kept = [w for w in reference.split() if _key(w) not in drop]
    return " ".join([*kept, *(SWITCHES[name].off for name in kernel)])
