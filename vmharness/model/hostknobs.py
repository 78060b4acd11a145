"""Host knobs an instance names (`[instance.host]`): the hypervisor's side of a mitigation, set on the
host before that instance's guest boots and given back when it stops (host/prepare/knobs.py).

Only an allow-list is known: each knob says what it mitigates and which values the kernel takes, so
a typing mistake or a value the kernel would refuse is said when the configuration is read, naming
the key. A parameter that KVM reads only when its module is loaded is set by reloading the module
while no guest runs (host/prepare/reload.py); one that is in use then is refused with that reason.

The configuration's shape: `[instance.host]` then `smt = "off"`, `kvm.nx_huge_pages = "force"` (a
dotted TOML key) or `"kvm.nx_huge_pages" = "force"` (a quoted one); both read the same. The value
is a `Knobs` mapping: hashable, so that an instance stays a value (runner.rides compares them), and
stored in a manifest as a plain JSON object that reads back the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmharness.errors import HarnessError

SMT = "smt"
MAX_UINT = (1 << 31) - 1  # KVM's recovery ratio and period are unsigned ints; kept to what any int holds
HINT = "docs/run.md lists the host knobs"


@dataclass(frozen=True)
class Knob:
    """One host knob: where it is (MODULE.PARAMETER, or smt) and what it takes."""

    key: str
    mitigates: str
    choices: tuple[str, ...] = ()  # the words it takes; empty: a whole number in [0, MAX_UINT]
    reload: bool = False  # read only at the module's load: set by reloading it while no guest runs

    @property
    def module(self) -> str:
        return self.key.partition(".")[0]

    @property
    def name(self) -> str:
        return self.key.partition(".")[2]


KNOBS = {k.key: k for k in (
    Knob(SMT, "cross-thread attacks (MDS, L1TF, TAA, SMT RSB, cross-thread Spectre): SMT off takes the "
         "sibling threads away", ("on", "off")),
    Knob("kvm.nx_huge_pages", "iTLB multihit: guest huge pages are mapped non-executable until executed, then "
         "split into small pages", ("force", "off", "auto")),
    Knob("kvm.nx_huge_pages_recovery_ratio", "iTLB multihit: the share (1/ratio) of split pages put back into "
         "huge pages each period (0: never)"),
    Knob("kvm.nx_huge_pages_recovery_period_ms", "iTLB multihit: how often split pages are recovered (0: "
         "derived from the ratio)"),
    Knob("kvm_intel.vmentry_l1d_flush", "L1TF: flush the L1 data cache on VM entry", ("always", "cond", "never")),
    # read only when the module loads: set by reloading it while no guest runs (host/prepare/reload.py)
    Knob("kvm.mitigate_smt_rsb", "cross-thread return address predictions (AMD SMT RSB, CVE-2022-27672): KVM "
         "keeps a guest from idling its thread without a VM exit", ("Y", "N"), reload=True),
    Knob("kvm_amd.npt", "nested paging: N makes KVM shadow the guest's page tables (every guest page-table "
         "change exits), the cost a CPU without it pays", ("Y", "N"), reload=True),
    Knob("kvm_intel.ept", "extended page tables: N makes KVM shadow the guest's page tables", ("Y", "N"),
         reload=True),
    Knob("kvm_amd.nested", "nested virtualization offered to guests (SVM in the guest's CPUID)", ("0", "1"),
         reload=True),
)}

NEVER = "'never' turns the mitigation off until the next boot (KVM refuses any later write), so it could not " \
        "be given back"


class Knobs(dict[str, str | int]):
    """The knobs one instance sets, key -> value; hashable so that an instance stays a value. Never
    changed after it is read (its reader builds it whole)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    @classmethod
    def from_table(cls, where: str, data: Any) -> Knobs:
        """Read by model/schema.py: the `[instance.host]` table, each key and value checked."""
        if not isinstance(data, dict):
            raise HarnessError(f"{where} must be a table of knob = value", f'e.g. smt = "off"; {HINT}')
        out = cls()
        for key, value in _flat(where, data):
            out[key] = check(f"{where}.{_show(key)}", key, value)
        return out


def _flat(where: str, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """`kvm.nx_huge_pages = ...` (a table kvm holding nx_huge_pages) and `"kvm.nx_huge_pages" = ...`
    (one key) alike, as (key, value) pairs; a key given both ways is an error."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        pairs = [(f"{key}.{k}", v) for k, v in value.items()] if isinstance(value, dict) else [(key, value)]
        for k, v in pairs:
            if isinstance(v, dict):
                raise HarnessError(f"{where}.{_show(k)} is a table: knobs are MODULE.PARAMETER = value", HINT)
            if k in out:
                raise HarnessError(f"{where}.{_show(k)} is given twice", "give each knob once")
            out[k] = v
    return list(out.items())


def _show(key: str) -> str:
    return key if len(key) <= 60 and key.isprintable() else repr(key[:57] + "...")


def check(where: str, key: str, value: Any) -> str | int:
    """One knob's value as the allow-list takes it, or an error naming `where`."""
    knob = KNOBS.get(key)
    if knob is None:
        raise HarnessError(f"{where}: unknown host knob {_show(key)}", f"known: {', '.join(KNOBS)}; {HINT}")
    if knob.choices:
        if key == "kvm.nx_huge_pages" and value == "never":
            raise HarnessError(f"{where} = 'never' is refused: {NEVER}", "use off: the same while it is set")
        if not isinstance(value, str) or value not in knob.choices:
            raise HarnessError(f"{where} must be {', '.join(knob.choices[:-1])} or {knob.choices[-1]}, not "
                               f"{str(value)[:40]!r}", HINT)
        return value
    if type(value) is not int or not 0 <= value <= MAX_UINT:
        raise HarnessError(f"{where} must be a whole number from 0 to {MAX_UINT}, not {str(value)[:40]!r}", HINT)
    return value


def describe(knobs: dict[str, str | int]) -> str:
    """`kvm.nx_huge_pages=force, smt=off`: the knobs in the order given."""
    return ", ".join(f"{k}={v}" for k, v in knobs.items())
