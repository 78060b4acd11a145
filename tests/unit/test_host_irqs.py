"""The host's interrupts of a passed-through NIC, on a writable synthetic root: which CPUs they go to,
each change journaled before it is made, given back at the end of the guest's session (on error and
on a signal too) and by host-restore, and never written to an IRQ whose number now names another."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.experiment import ops
from vmharness.guest import placement, record, session
from vmharness.guest.domain import Placement
from vmharness.host.prepare import irqs
from vmharness.journal import journal
from vmharness.model import config, sections
from vmharness.signals import Interrupted, terminate_as_interrupt
from vmharness.system.root import HostRoot

NIC = "0000:b3:00.0"
OTHER = "0000:b3:00.1"
OWNER = "run:20260101-000000-abcd"


def vfio_host(tmp_path: Path, per_node: int = 8) -> FakeHost:
    """Two nodes of `per_node` CPUs; the NIC on node 1 with three vectors in use by its guest, the
    other function's one vector, and some of the host's own IRQs between them."""
    h = FakeHost(tmp_path / "root", nodes=2, cpus_per_node=per_node)
    everyone = f"0-{2 * per_node - 1}"
    h.interrupt(40, "nvme0q1", everyone)
    for vector, number in enumerate((45, 46, 47)):
        h.interrupt(number, f"vfio-msix[{vector}]({NIC})", everyone)
    h.interrupt(48, f"vfio-msix[0]({OTHER})", everyone)
    h.interrupt(49, f"vfio-intx({NIC})", everyone)  # a line that may be shared: never ours
    return h


def affinity(h: FakeHost, number: int) -> str:
    return h.p(f"proc/irq/{number}/smp_affinity_list").read_text().strip()


def writable(h: FakeHost) -> HostRoot:
    return HostRoot(h.base, allow_writes=True)


# finding them ------------------------------------------------------------------------------------
def test_proc_interrupts_names_come_after_the_chip_columns_and_shared_lines_keep_every_name() -> None:
    text = ("            CPU0       CPU1\n"
            "   0:         36          0   IO-APIC   2-edge      timer\n"
            "  16:          0          0   IO-APIC  16-fasteoi   ehci_hcd:usb1, eth2\n"
            "  45:        102          7  IR-PCI-MSIX-0000:b3:00.0    0-edge      vfio-msix[0](0000:b3:00.0)\n"
            " NMI:          0          0   Non-maskable interrupts\n"
            " 120:          0          0\n")  # an IRQ with no handler
    assert irqs.names(text) == {0: "timer", 16: "ehci_hcd:usb1, eth2", 45: "vfio-msix[0](0000:b3:00.0)",
                                120: "0"}


def test_only_the_devices_msi_x_and_msi_vectors_are_found_never_their_intx_line(tmp_path: Path) -> None:
    h = vfio_host(tmp_path)
    h.interrupt(50, f"vfio-msi[0]({NIC})")
    found = irqs.vfio(HostRoot(h.base), (NIC,))
    assert [(i.number, i.name) for i in found] == [(45, f"vfio-msix[0]({NIC})"), (46, f"vfio-msix[1]({NIC})"),
                                                   (47, f"vfio-msix[2]({NIC})"), (50, f"vfio-msi[0]({NIC})")]
    assert [i.number for i in irqs.vfio(HostRoot(h.base), (NIC, OTHER))] == [45, 46, 47, 48, 50]
    assert irqs.wait(HostRoot(h.base), ("0000:b4:00.0",), timeout=0) == ()
    assert [i.number for i in irqs.wait(HostRoot(h.base), (NIC, "0000:b4:00.0"), timeout=60)] == [45, 46, 47, 50]


# which CPUs ----------------------------------------------------------------------------------------
def test_the_nics_node_cpus_without_vcpus_and_without_the_emulator_when_others_are_left() -> None:
    placed = Placement(1, (9, 10), (8,), "node 1")
    assert placement.irq_cpus(tuple(range(8, 16)), placed) == (
        (11, 12, 13, 14, 15), "the CPUs of node 1 that hold no vCPU and no QEMU emulator thread")


def test_the_emulators_cpu_is_taken_when_it_is_the_only_one_without_a_vcpu() -> None:
    placed = Placement(1, (9, 10, 11), (8,), "node 1")
    assert placement.irq_cpus((8, 9, 10, 11), placed)[0] == (8,)


def test_no_cpu_is_left_when_every_cpu_of_the_node_runs_a_vcpu() -> None:
    placed = Placement(None, (0, 1), (0, 1), "no NUMA information")
    assert placement.irq_cpus((0, 1), placed) == ((), "every CPU of this host holds a vCPU of the guest")


# pinning and giving back -------------------------------------------------------------------------
def test_each_irq_is_journaled_before_its_cpus_change_then_given_back(tmp_path: Path) -> None:
    h = vfio_host(tmp_path)
    root = writable(h)
    found = irqs.vfio(root, (NIC,))
    made, seen = irqs.pin(root, found, (11, 12, 13, 14, 15), OWNER)
    assert [affinity(h, n) for n in (45, 46, 47)] == ["11-15"] * 3
    assert affinity(h, 48) == affinity(h, 40) == "0-15"  # the other function's, the host's own: untouched
    assert [(r["op"], r["irq"], r["name"], r["before"], r["after"], r["owner"]) for r in journal.read(root)] == [
        ("irq", n, f"vfio-msix[{v}]({NIC})", "0-15", "11-15", OWNER) for v, n in enumerate((45, 46, 47))]
    assert seen[0] == {"irq": 45, "name": f"vfio-msix[0]({NIC})", "before": "0-15", "after": "11-15"}
    said: list[str] = []
    assert irqs.give_back(root, made, said.append) == []
    assert [affinity(h, n) for n in (45, 46, 47)] == ["0-15"] * 3
    assert not root.exists(journal.JOURNAL) and len(said) == 3


def test_an_irq_already_on_those_cpus_is_left_and_not_journaled(tmp_path: Path) -> None:
    h = vfio_host(tmp_path)
    h.interrupt(45, f"vfio-msix[0]({NIC})", "11-15")
    root = writable(h)
    made, seen = irqs.pin(root, irqs.vfio(root, (NIC,)), (11, 12, 13, 14, 15), OWNER)
    assert [r["irq"] for r in made] == [46, 47] and len(seen) == 3


def test_an_irq_gone_by_restore_time_is_settled_and_nothing_is_written(tmp_path: Path) -> None:
    h = vfio_host(tmp_path)
    root = writable(h)
    made, _ = irqs.pin(root, irqs.vfio(root, (NIC,)), (11,), OWNER)
    for n in (45, 46, 47):  # the domain stopped: vfio freed its vectors
        h.free_interrupt(n)
    assert irqs.give_back(root, made, lambda _l: None) == []
    assert not root.exists(journal.JOURNAL)
    assert not h.p("proc/irq/45").exists()  # no file made where the IRQ was


def test_a_reused_irq_number_is_never_written(tmp_path: Path) -> None:
    """Freed, then handed to another device's vector (or to the other function's, a name of the same
    shape): the number matches, the name does not, and its CPUs stay as its new owner set them."""
    h = vfio_host(tmp_path)
    root = writable(h)
    made, _ = irqs.pin(root, irqs.vfio(root, (NIC,)), (11,), OWNER)
    h.free_interrupt(45)
    h.interrupt(45, "nvme0q2", "3")
    h.free_interrupt(46)
    h.interrupt(46, f"vfio-msix[1]({OTHER})", "4")
    assert irqs.give_back(root, made, lambda _l: None) == []
    assert (affinity(h, 45), affinity(h, 46), affinity(h, 47)) == ("3", "4", "0-15")
    assert not root.exists(journal.JOURNAL)


def test_an_irq_reused_between_finding_and_writing_is_not_written(tmp_path: Path) -> None:
    h = vfio_host(tmp_path)
    root = writable(h)
    found = irqs.vfio(root, (NIC,))
    h.free_interrupt(46)
    h.interrupt(46, "nvme0q2", "0-15")
    made, seen = irqs.pin(root, found, (11,), OWNER)
    assert (affinity(h, 45), affinity(h, 46), affinity(h, 47)) == ("11", "0-15", "11")
    assert [s["after"] for s in seen] == ["11", None, "11"]
    assert irqs.give_back(root, made, lambda _l: None) == [] and affinity(h, 46) == "0-15"


@pytest.mark.parametrize("damage", [{"irq": "45"}, {"irq": -1}, {"irq": True}, {"name": "nvme0q1"},
                                    {"name": None}, {"before": "0-x"}, {"before": ""}, {"before": 7}])
def test_a_damaged_record_writes_nothing_and_stays_for_the_researcher(cli, tmp_path: Path,
                                                                      damage: dict[str, object]) -> None:
    h = vfio_host(tmp_path)
    root = writable(h)
    irqs.pin(root, irqs.vfio(root, (NIC,))[:1], (11,), OWNER)
    path = root.path(journal.JOURNAL)
    path.write_text(json.dumps({**json.loads(path.read_text()), **damage}) + "\n")
    code, out, _ = cli("host-restore", "--host-root", str(h.base), "--dry-run")  # it can still be shown
    assert code == 0 and "IRQ " in out and "if it is still there" in out
    problems = ops.undo_all(root, lambda _l: None)  # what host-restore does
    assert len(problems) == 1 and "journal record 1 is damaged" in problems[0] and "nothing written" in problems[0]
    assert affinity(h, 45) == "11" and [r["seq"] for r in journal.outstanding(journal.read(root))] == [1]


def test_host_restore_after_a_crash_gives_back_the_cpus_and_the_op_is_in_the_one_table(cli, tmp_path: Path) -> None:
    assert irqs in ops.REGISTRARS and "irq" in journal.OPS
    h = vfio_host(tmp_path)
    root = writable(h)
    irqs.pin(root, irqs.vfio(root, (NIC,)), (11,), OWNER)  # and the harness is killed: nothing given back
    code, out, _ = cli("host-restore", "--host-root", str(h.base), "--dry-run")
    assert code == 0 and out.splitlines()[1:] == [
        f"  IRQ {n} vfio-msix[{v}]({NIC}) back on CPUs 0-15, if it is still there"
        for v, n in reversed(list(enumerate((45, 46, 47))))]
    assert ops.undo_all(root, lambda _l: None) == []
    assert [affinity(h, n) for n in (45, 46, 47)] == ["0-15"] * 3 and not root.exists(journal.JOURNAL)


def test_a_write_the_kernel_does_not_keep_puts_back_what_was_moved(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    h = vfio_host(tmp_path)
    root = writable(h)
    real = HostRoot.write_text

    def refuse_the_third(self: HostRoot, p: str, text: str) -> None:
        if p == irqs.affinity_path(47) and text == "11":
            raise HarnessError("the kernel refused '11' -> /proc/irq/47/smp_affinity_list: Input/output error")
        real(self, p, text)

    monkeypatch.setattr(HostRoot, "write_text", refuse_the_third)
    with pytest.raises(HarnessError, match="refused"):
        irqs.pin(root, irqs.vfio(root, (NIC,)), (11,), OWNER)
    assert [affinity(h, n) for n in (45, 46, 47)] == ["0-15"] * 3 and not root.exists(journal.JOURNAL)


# the guest's session -----------------------------------------------------------------------------
def booted(h: FakeHost, vcpus: tuple[int, ...], emulator: tuple[int, ...], node: int | None = 1) -> session.Booted:
    guest = record.Guest("r1", "qemu:///system", "uuid", "/o", "/c", True, ())
    return session.Booted(guest, None, "198.19.0.2", "eth1", {}, "", {},  # type: ignore[arg-type]
                          Placement(node, vcpus, emulator, "test"))


def run_cfg(bdf: tuple[str, ...] = (NIC,), uri: str = "qemu:///system") -> sections.RunConfig:
    cfg = config.run_from_json({"instance": [{"name": "a"}]})
    return dataclasses.replace(cfg, guest=dataclasses.replace(cfg.guest, bdf=bdf, uri=uri))


def test_a_session_moves_them_off_the_vcpus_and_gives_them_back_when_it_ends(tmp_path: Path) -> None:
    h = vfio_host(tmp_path)
    root = writable(h)
    said: list[str] = []
    with session.host_irqs(root, run_cfg(), booted(h, (9, 10), (8,)), said.append, OWNER, True) as report:
        assert [affinity(h, n) for n in (45, 46, 47)] == ["11-15"] * 3
        assert len(journal.outstanding(journal.read(root))) == 3
    assert report["cpus"] == [11, 12, 13, 14, 15] and "no vCPU and no QEMU emulator" in report["why"]
    assert [i["irq"] for i in report["irqs"]] == [45, 46, 47] and "note" not in report
    assert said[0] == (f"host interrupts of {NIC} (IRQ 45, 46, 47) on CPUs 11-15: the CPUs of node 1 that hold "
                       "no vCPU and no QEMU emulator thread")
    assert [affinity(h, n) for n in (45, 46, 47)] == ["0-15"] * 3 and not root.exists(journal.JOURNAL)


@pytest.mark.parametrize("ending", ["error", "signal"])
def test_an_error_or_a_signal_in_the_session_gives_them_back(tmp_path: Path, ending: str) -> None:
    h = vfio_host(tmp_path)
    root = writable(h)
    with contextlib.ExitStack() as stack:
        stack.enter_context(pytest.raises(Interrupted if ending == "signal" else HarnessError))
        stack.enter_context(terminate_as_interrupt())
        stack.enter_context(session.host_irqs(root, run_cfg(), booted(h, (9,), (8,)), lambda _l: None, OWNER, True))
        assert affinity(h, 45) == "10-15"
        if ending == "signal":
            signal.raise_signal(signal.SIGTERM)
        raise HarnessError("wrk failed")
    assert [affinity(h, n) for n in (45, 46, 47)] == ["0-15"] * 3 and not root.exists(journal.JOURNAL)


def test_with_every_cpu_holding_a_vcpu_they_are_listed_and_left_alone(tmp_path: Path) -> None:
    h = vfio_host(tmp_path, per_node=1)
    with session.host_irqs(writable(h), run_cfg(), booted(h, (1,), (1,)), lambda _l: None, OWNER, True) as report:
        assert not writable(h).exists(journal.JOURNAL)
    assert report["cpus"] == [] and [i["irq"] for i in report["irqs"]] == [45, 46, 47]
    assert report["note"] == f"every CPU of node 1 holds a vCPU of the guest: the host interrupts of {NIC} stay " \
                             "where they are"
    assert affinity(h, 45) == "0-1"


def test_nothing_is_touched_without_a_nic_with_the_profile_keeping_them_or_with_a_remote_guest(tmp_path: Path) -> None:
    h = vfio_host(tmp_path)
    b = booted(h, (9,), (8,))
    for cfg, wanted, note in ((run_cfg(bdf=()), True, "no NIC passed through"),
                              (run_cfg(), False, "left alone: the profile keeps them (vfio_irqs = keep)"),
                              (run_cfg(uri="qemu+ssh://server/system"), True, "the guest runs at qemu+ssh://server"
                               "/system: its NIC's host interrupts are there, and left alone")):
        with session.host_irqs(writable(h), cfg, b, lambda _l: None, OWNER, wanted) as report:
            assert report == {"note": note}
    assert affinity(h, 45) == "0-15" and not writable(h).exists(journal.JOURNAL)


def test_no_vectors_within_the_wait_is_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = vfio_host(tmp_path)
    monkeypatch.setattr(session, "IRQ_WAIT", 0.0)
    cfg = run_cfg(bdf=("0000:b4:00.0",))
    with session.host_irqs(writable(h), cfg, booted(h, (9,), (8,)), lambda _l: None, OWNER, True) as report:
        pass
    assert report["irqs"] == [] and report["note"].startswith("vfio-pci holds no MSI or MSI-X interrupt of "
                                                              "0000:b4:00.0 on this host 0 s after")


def test_the_seeds_profile_asks_for_it_and_none_does_not() -> None:
    from vmharness.model import profile

    assert profile.load("seeds").vfio_irqs == "off-vcpus" and profile.load("none").vfio_irqs == "keep"
