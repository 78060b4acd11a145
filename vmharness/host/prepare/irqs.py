"""The host's interrupts of a NIC passed through to a guest, and the CPUs they are delivered on.

Once the guest's driver enables MSI-X (or MSI), vfio-pci requests one host IRQ per vector it
unmasks, named `vfio-msix[VECTOR](BDF)` in /proc/interrupts. Each of its interrupts lands on a host
CPU before KVM hands it to the guest; on a vCPU's CPU it takes that vCPU's time, on an idle CPU of
the NIC's node it costs the guest nothing. A run moves them there (`pin`) for the guest's session
and gives them back before the guest goes (`give_back`), each change journaled first (op `irq`).

An IRQ number is the kernel's to hand out again: once the guest is gone, vfio has freed its
vectors, and the number may name another device's interrupt. So a record holds the number AND the
name, and an IRQ is changed, or given back, only while /proc/interrupts shows that name at that
number. One that is gone, or now someone else's, is settled: its affinity died with it."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from vmharness.cpus import format_cpulist, parse_cpulist
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.journal import journal, restore
from vmharness.journal.journal import Op, Record
from vmharness.journal.kinds import OpKind
from vmharness.progress import Say
from vmharness.signals import shielded
from vmharness.system.root import LARGE_READ, HostRoot

INTERRUPTS = "/proc/interrupts"
# vfio-pci's names (drivers/vfio/pci/vfio_pci_intrs.c): one per MSI or MSI-X vector of a device. Its
# INTx line ("vfio-intx(BDF)") may be shared with another device's, so it is never touched.
VFIO = re.compile(r"vfio-(?:msix|msi)\[([0-9]{1,5})\]\(([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\)")


@dataclass(frozen=True)
class Irq:
    number: int
    name: str  # as /proc/interrupts names it: vfio-msix[0](0000:b3:00.0)


def names(text: str) -> dict[int, str]:
    """IRQ number -> its handlers' names, from /proc/interrupts' text. The kernel ends each line with
    the names, two spaces before the first and `, ` between them (a shared line); what comes
    before them (counts per CPU, chip, hardware IRQ) varies by architecture and chip."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        number, colon, rest = line.partition(":")
        if not colon or not is_digits(number.strip()):
            continue  # the CPU header, and NMI, LOC, ... (counters, not IRQs)
        words = rest.split()
        if not words:
            continue
        first = len(words) - 1
        while first > 0 and words[first - 1].endswith(","):
            first -= 1
        out[int(number)] = " ".join(words[first:])
    return out


def listed(root: HostRoot) -> dict[int, str]:
    return names(root.read_optional(INTERRUPTS, limit=LARGE_READ) or "")


def vfio(root: HostRoot, bdfs: tuple[str, ...]) -> tuple[Irq, ...]:
    """The MSI and MSI-X vectors vfio-pci holds for these devices now, in IRQ order."""
    wanted = set(bdfs)
    found = []
    for number, name in sorted(listed(root).items()):
        m = VFIO.fullmatch(name)
        if m and m.group(2) in wanted:
            found.append(Irq(number, name))
    return tuple(found)


def wait(root: HostRoot, bdfs: tuple[str, ...], timeout: float) -> tuple[Irq, ...]:
    """The devices' vectors once there are any, or none after `timeout` seconds. A driver asks for all
    of a NIC's vectors at once when the NIC is brought up; a second NIC the guest leaves down never
    gets any, so the first to appear ends the wait."""
    deadline = time.monotonic() + timeout
    while True:
        found = vfio(root, bdfs)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def affinity_path(number: int) -> str:
    return f"/proc/irq/{number}/smp_affinity_list"


def pin(root: HostRoot, found: tuple[Irq, ...], cpus: tuple[int, ...], owner: str
        ) -> tuple[list[Record], list[dict[str, object]]]:
    """Deliver each IRQ on `cpus`: the records made (journaled before each write) and, for the run's
    records, each IRQ's CPUs before and after. A write the kernel refuses or does not keep is an
    error; what was changed is given back first, and so it is on a signal."""
    want = format_cpulist(cpus)
    made: list[Record] = []
    seen: list[dict[str, object]] = []
    try:
        for irq in found:
            path = affinity_path(irq.number)
            before = root.read_optional(path)
            if before is None:
                continue  # freed since it was listed
            seen.append({"irq": irq.number, "name": irq.name, "before": before, "after": want})
            if set(parse_cpulist(before, path)) == set(cpus):
                continue
            with shielded():  # journaled and in `made` together: a signal in between would orphan the record
                made.append(journal.record(root, {"op": OpKind.IRQ, "irq": irq.number, "name": irq.name,
                                                  "before": before, "after": want}, owner))
            if listed(root).get(irq.number) != irq.name:
                seen[-1]["after"] = None  # freed, perhaps handed to another device, since it was listed
                continue
            root.write_text(path, want)
            now = root.read_optional(path)
            if now is None or set(parse_cpulist(now, path)) != set(cpus):
                raise HarnessError(f"IRQ {irq.number} ({irq.name}): {path} reads {now!r} after writing {want}",
                                   "the kernel did not keep the CPUs (an interrupt chip that cannot move it?)")
    except BaseException:
        give_back(root, made, lambda _line: None)
        raise
    return made, seen


def give_back(root: HostRoot, made: list[Record], say: Say) -> list[str]:
    """Undo `pin`'s records (through the one undo loop, so they are released as host-restore would);
    returns the problems left."""
    seqs = {r["seq"] for r in made}
    return restore.undo(root, say, only=lambda rec: rec["seq"] in seqs) if seqs else []


# The journal's op --------------------------------------------------------------------------------
def _describe(rec: Record) -> str:
    return f"IRQ {rec.get('irq')} {rec.get('name')} back on CPUs {rec.get('before')}, if it is still there"


def _damage(rec: Record) -> str | None:
    """Why a record cannot be trusted to name one IRQ and a CPU list, if it cannot."""
    n, name, before = rec.get("irq"), rec.get("name"), rec.get("before")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return f"its irq {n!r} is not an IRQ number"
    if not isinstance(name, str) or not VFIO.fullmatch(name):
        return f"its name {name!r} is not one vfio-pci gives"
    try:
        if not isinstance(before, str) or not parse_cpulist(before):
            raise HarnessError("empty")
    except HarnessError:
        return f"its CPUs {before!r} are not a CPU list"
    return None


def _undo(root: HostRoot, rec: Record) -> list[str]:
    """Write the recorded CPUs back, only to the IRQ of that number that still has that name."""
    damage = _damage(rec)
    if damage is not None:
        return [f"journal record {rec.get('seq')} is damaged ({damage}): nothing written; put the IRQ's "
                f"affinity back by hand if it is still there, then remove the record"]
    if listed(root).get(rec["irq"]) != rec["name"]:
        return []  # gone with its guest, or the number is another device's now: nothing of ours is left
    root.write_text(affinity_path(rec["irq"]), rec["before"])
    return []


journal.register(OpKind.IRQ, Op(_describe, _undo, ("irq", "name", "before", "after")))
