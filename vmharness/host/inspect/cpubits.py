"""The CPU bits an instance shows its guest, checked before anything is booted.

A guest chooses its mitigations from the CPUID and ARCH_CAPABILITIES bits it is shown. Two ways to get
that wrong cost a whole run: a name QEMU does not know (QEMU exits, or libvirt refuses the domain, at the
first boot: 7.2 has no rfds-no, gds-no, bhi-no or srso-no), and a `*-no` bit the host's CPU does not
have, which tells the guest it need not mitigate a bug the hardware has (QEMU's cpu-models-x86 document
warns never to do that): the guest then runs faster *because it is unprotected*, and the report would
call that the variant's cost. So each name is checked against the QEMU binary's own list (one QMP
session a run, no guest started), and a `*-no` bit the host lacks is refused unless the instance names
it in `claim_unmitigated` (it means it: a study of what the mitigation costs, say).

"The host has it": under KVM, QEMU's expansion of `host` (what KVM passes on); otherwise, and on a host
snapshot, the host kernel's own verdict in /sys/devices/system/cpu/vulnerabilities ("Not affected" for
the bug the bit is about). The two can disagree (docs/notes-hypervisor.md: KVM's `host` here sets
mds-no while /proc/cpuinfo shows no arch_capabilities), so each refusal says which it read.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.host.inspect import qemu_cpu
from vmharness.system import sysfs
from vmharness.system.root import HostRoot

VULNERABILITIES = sysfs.VULNERABILITIES
# The bits that say "this CPU need not be protected from X", and where the host kernel says whether it
# is: the vulnerability file and the words that mean "not affected" (None: the file reads "Not affected").
NO_BITS: dict[str, tuple[str, str | None]] = {
    "mds-no": ("mds", None), "taa-no": ("tsx_async_abort", None), "rfds-no": ("reg_file_data_sampling", None),
    "gds-no": ("gather_data_sampling", None), "bhi-no": ("spectre_v2", "BHI: Not affected"),
    "srso-no": ("spec_rstack_overflow", None), "pschange-mc-no": ("itlb_multihit", None),
    "skip-l1dfl-vmentry": ("l1tf", None), "rdctl-no": ("meltdown", None), "ssb-no": ("spec_store_bypass", None),
    "amd-no-ssb": ("spec_store_bypass", None), "pbrsb-no": ("spectre_v2", "PBRSB-eIBRS: Not affected"),
    "its-no": ("indirect_target_selection", None), "sbdr-ssdp-no": ("mmio_stale_data", None),
    "fbsdp-no": ("mmio_stale_data", None), "psdp-no": ("mmio_stale_data", None), "tsa-sq-no": ("tsa", None),
    "tsa-l1-no": ("tsa", None),
}
NOT_AFFECTED = "Not affected"


def is_no_bit(name: str) -> bool:
    """A bit that tells the guest it need not mitigate something."""
    return name in NO_BITS or name.endswith("-no")


@dataclass(frozen=True)
class Qemu:
    """QEMU's answer, asked once a run: every boolean property its CPU takes (the flags of `-cpu help`
    and the aliases libvirt writes, lahf_lm or pclmuldq), and under KVM the expansion of `host`."""

    known: frozenset[str]
    host: dict[str, bool] | None  # None: not asked (TCG, or a host snapshot)
    where: str  # whose answer: "qemu-system-x86_64 (KVM)", "this machine's qemu-system-x86_64"


def parse_models(stdout: str) -> list[dict[str, bool]]:
    """Every model expansion in a QMP session's output, in order (one JSON object a line)."""
    out = []
    for line in stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and isinstance(msg.get("return"), dict) and "model" in msg["return"]:
            out.append(qemu_cpu.parse_expansion(line))
        elif isinstance(msg, dict) and "error" in msg:
            qemu_cpu.parse_expansion(line)  # raises, naming QEMU's reason
    return out


def ask(kvm: bool, qemu: str = qemu_cpu.QEMU) -> Qemu:
    """One QEMU process (`-machine none`, no guest): the expansion of `max`, and of `host` under KVM."""
    binary = qemu_cpu._binary(qemu)
    models = ["max", "host"] if kvm else ["max"]
    commands = [{"execute": "qmp_capabilities"},
                *({"execute": "query-cpu-model-expansion", "arguments": {"type": "full", "model": {"name": m}}}
                  for m in models), {"execute": "quit"}]
    out = qemu_cpu._run([binary, "-machine", "none", "-accel", "kvm" if kvm else "tcg", "-nodefaults", "-display",
                         "none", "-qmp", "stdio"], "".join(json.dumps(c) + "\n" for c in commands))
    found = parse_models(out)
    if len(found) != len(models):
        raise HarnessError(f"{binary} answered {len(found)} of {len(models)} CPU model expansions",
                           "run it by hand with -qmp stdio to see why")
    return Qemu(frozenset(found[0]), found[1] if kvm else None, f"{binary} ({'KVM' if kvm else 'TCG'})")


def host_verdict(root: HostRoot, bit: str) -> tuple[bool, str]:
    """Whether the host kernel calls itself not affected by the bug `bit` is about, and what it read."""
    if bit not in NO_BITS:
        return False, f"no vulnerability file is known to match {bit}"
    name, words = NO_BITS[bit]
    text = root.read_optional(f"{VULNERABILITIES}/{name}")
    if text is None:
        return False, f"the host kernel has no {VULNERABILITIES}/{name}"
    said = (words in text) if words else text == NOT_AFFECTED
    return said, f"the host's {VULNERABILITIES}/{name} says {text[:120]!r}"


def check(root: HostRoot, qemu: Qemu, instance: str, features: tuple[str, ...], claims: tuple[str, ...]) -> list[str]:
    """Refuse (HarnessError) an unknown name, a claim of a bit the instance does not require, or a `*-no`
    bit the host lacks and the instance does not claim; returns a note for each claimed bit it lacks."""
    notes = []
    wanted = {f[1:] for f in features if f.startswith("+")}
    for feature in features:
        name = feature[1:]
        if name not in qemu.known:
            close = difflib.get_close_matches(name, sorted(qemu.known), n=3, cutoff=0.6)
            raise HarnessError(f"instance {instance}: cpu_features {feature!r}: {qemu.where} knows no CPU feature "
                               f"{name!r}", ("close names: " + ", ".join(close)) if close else
                               "qemu-system-x86_64 -cpu help lists the names it knows")
    for claim in claims:
        if claim not in wanted:
            raise HarnessError(f"instance {instance}: claim_unmitigated {claim!r} is not one of its cpu_features "
                               "with +", f"add \"+{claim}\" to cpu_features, or drop it from claim_unmitigated")
    for name in sorted(wanted):
        if not is_no_bit(name):
            continue
        has, why = host_has(root, qemu, name)
        if has:
            notes.append(f"{instance}: +{name} checked: {why}")
            continue
        if name in claims:
            notes.append(f"{instance}: +{name} shown to the guest although the host lacks it ({why}): "
                         "claimed (claim_unmitigated)")
            continue
        raise HarnessError(f"instance {instance}: cpu_features +{name} tells the guest it need not mitigate what "
                           f"the host's CPU is not known to be free of ({why})",
                           f"drop +{name}, or add claim_unmitigated = [\"{name}\"] to the instance if you mean it")
    return notes


def host_has(root: HostRoot, qemu: Qemu, name: str) -> tuple[bool, str]:
    """(the host has the bit, what that was read from)."""
    if qemu.host is not None:
        has = qemu.host.get(name) is True
        return has, f"KVM's expansion of the host CPU {'sets' if has else 'does not set'} {name}"
    return host_verdict(root, name)

