"""The journal and the lock, on a writable synthetic root: one table of ops, every record with an
owner, damage reported in one line, and nothing a reader does not know ever dropped."""

from __future__ import annotations

import os

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.experiment import ops
from vmharness.host.prepare import irqs
from vmharness.journal import journal, restore
from vmharness.journal.kinds import OpKind
from vmharness.system.root import HostRoot

HP = "host-prepare"


def writable(host: FakeHost) -> HostRoot:
    return HostRoot(host.base, allow_writes=True)


def test_records_are_numbered_and_a_torn_last_line_is_dropped_and_cut_off_before_the_next(host: FakeHost) -> None:
    root = writable(host)
    journal.record(root, {"op": "begin", "pid": 1})
    journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0}, HP)
    with open(root.path(journal.JOURNAL), "a") as f:
        f.write('{"op": "bind", "bdf": "00')  # killed mid-write
    found = journal.load(root)
    assert [(r["seq"], r["op"]) for r in found.records] == [(1, "begin"), (2, "pages")]
    assert found.torn == '{"op": "bind", "bdf": "00'
    journal.record(root, {"op": "pages", "node": 0, "size_kib": 2048, "before": 0}, HP)
    assert [r["seq"] for r in journal.read(root)] == [1, 2, 3]  # the torn line is gone, not buried mid-file
    assert journal.load(root).torn is None


def test_every_op_is_a_row_of_one_table_with_a_description_and_an_undo() -> None:
    assert ops.REGISTRARS  # importing them fills the table
    changes = {name for name, op in journal.OPS.items() if op.undo is not None}
    assert changes == {"bind", "pages", "mount", "modules", "file", "irq", "domain", "tune", "server", "process",
                       "hostknob", "reload", "kexec", "boot unit"}
    assert {name for name, op in journal.OPS.items() if op.undo is None} == {"begin", "released", "owner"}


def test_every_kind_is_registered_and_every_registered_op_is_a_kind() -> None:
    assert ops.REGISTRARS  # importing them fills the table
    assert sorted(journal.OPS) == sorted(OpKind)
    assert all(type(name) is OpKind for name in journal.OPS)


def test_a_kind_is_written_as_its_plain_string_the_same_line_as_a_bare_string(host: FakeHost) -> None:
    root = writable(host)
    journal.record(root, {"op": OpKind.PAGES, "node": 1, "size_kib": 2048, "before": 0}, HP)
    journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0}, HP)
    first, second = root.path(journal.JOURNAL).read_text().splitlines()
    assert '"op": "pages"' in first and "OpKind" not in first
    assert first.replace('"seq": 1', "").split('"time"')[0] == second.replace('"seq": 2', "").split('"time"')[0]
    assert [type(r["op"]) for r in journal.read(root)] == [str, str]


def test_an_op_no_one_registered_is_refused_when_recorded(host: FakeHost) -> None:
    root = writable(host)
    with pytest.raises(RuntimeError, match="'netns' is not registered"):
        journal.record(root, {"op": "netns", "name": "x"}, HP)
    assert not root.exists(journal.JOURNAL)


def test_a_change_without_an_owner_or_a_field_is_refused(host: FakeHost) -> None:
    root = writable(host)
    with pytest.raises(RuntimeError, match="an owner"):
        journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0})
    with pytest.raises(RuntimeError, match="before"):
        journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048}, HP)
    assert not root.exists(journal.JOURNAL)


def test_restore_plan_is_newest_first(cli, host: FakeHost) -> None:
    root = writable(host)
    journal.record(root, {"op": "begin", "pid": 1})
    journal.record(root, {"op": "modules", "names": ["vfio-pci"], "loaded_before": []}, HP)
    journal.record(root, {"op": "bind", "bdf": "0000:81:00.0", "driver": "e1000e", "override": None}, HP)
    journal.record(root, {"op": "bind", "bdf": "0000:81:00.1", "driver": None, "override": "pci-stub"}, HP)
    journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0}, HP)
    journal.record(root, {"op": "mount", "path": "/run/vmharness/hugepages-2M", "created": True}, HP)
    assert [r["op"] for r in restore.pending(root)] == ["mount", "pages", "bind", "bind", "modules"]
    code, out, _ = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        "host-restore plan (in undo order)",
        "  unmount /run/vmharness/hugepages-2M and remove it",
        "  node 1: 2M hugepages back to 0",
        "  0000:81:00.0: back to e1000e (driver_override cleared)",
        "  0000:81:00.1: back to no driver (driver_override pci-stub)",
        "  unload the modules it loaded: vfio-pci and what they brought along",
    ]


def test_a_record_of_an_unknown_op_is_reported_and_the_journal_kept(cli, host: FakeHost) -> None:
    root = writable(host)
    path = root.path(journal.JOURNAL)
    path.parent.mkdir(parents=True)
    path.write_text('{"seq": 1, "op": "netns", "owner": "run:0123456789", "time": 1}\n'
                    '{"seq": 2, "op": "file", "path": "/tmp/vmharness-report-nonexistent-1.lua", "ssh": null, '
                    '"owner": "tune"}\n')
    assert [r["seq"] for r in restore.pending(root)] == [2]
    said: list[str] = []
    assert restore.undo(root, said.append) == []
    assert said == ["undone: remove /tmp/vmharness-report-nonexistent-1.lua"]
    assert path.exists() and [r["seq"] for r in journal.outstanding(journal.read(root))] == [1]
    code, out, _ = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert code == 1
    assert [ln for ln in out.splitlines() if "netns" in ln] == [
        f"  KEPT: {journal.JOURNAL}: record 1 has op 'netns', which this vmharness does not know: it is kept "
        "(a newer vmharness wrote it? undo it by hand, then remove the journal)"]
    problems = restore.reclaim(root, said.append)  # a dead run's unknown record is not dropped either
    assert len(problems) == 1 and "record 1 has op 'netns'" in problems[0] and path.exists()


PAGES = '{"seq": 1, "op": "pages", "node": 0, "size_kib": 2048, "before": 0, "owner": "x"}'


@pytest.mark.parametrize(("text", "fault"), [
    (f'{PAGES}\nnot json\n{PAGES}\n', "line 2 is not JSON"),
    ("[1, 2]\n[3]\n", "line 1 is not a record (a JSON list)"),
    ('{"seq": 1, "op": "begin", "pid": 1}\n{"op": "pages"}\n{"seq": 3, "op": "begin", "pid": 1}\n',
     "line 2 has no seq number or no op"),
    ('{"seq": "1", "op": "begin"}\n', "line 1 has no seq number or no op"),
    ('{"seq": true, "op": "begin", "pid": 1}\n', "line 1 has no seq number or no op"),
    ('{"seq": 1, "op": "begin", "pid": 1}\n\n{"seq": 2, "op": "begin", "pid": 1}\n', "line 2 is not JSON"),
    # a record of a known op without its fields, or with one of another shape (each was a traceback)
    ('{"seq": 1, "op": "pages"}\n', "line 1 is a 'pages' record without node, size_kib, before"),
    (PAGES.replace('"node": 0', '"node": "x"') + "\n", "line 1 is a 'pages' record whose node is 'x'"),
    ('{"seq": 1, "op": "released", "seqs": 5}\n', "line 1 is a 'released' record whose seqs is '5'"),
    ('{"seq": 1, "op": "owner", "seqs": [1], "to": 7}\n', "line 1 is a 'owner' record whose to is '7'"),
    ('{"seq": 1, "op": "bind", "bdf": ["x"], "driver": null, "override": null, "owner": "host-prepare"}\n',
     "line 1 is a 'bind' record whose bdf is \"['x']\""),
    (PAGES.replace('"owner": "x"', '"owner": 5') + "\n", "line 1 is a 'pages' record whose owner is '5'"),
])
def test_a_damaged_journal_is_one_line_naming_it_and_the_fault(cli, host: FakeHost, text: str, fault: str) -> None:
    path = host.base / journal.JOURNAL.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    code, out, err = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert code == 2 and out == ""
    assert err.splitlines()[0] == f"error: {journal.JOURNAL} is damaged: {fault}"
    assert len(err.splitlines()) == 2 and err.splitlines()[1].startswith("hint: ")
    assert path.read_text() == text


def test_a_torn_last_line_is_said_and_the_rest_restored(cli, host: FakeHost) -> None:
    path = host.base / journal.JOURNAL.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text('{"seq": 1, "op": "pages", "node": 0, "size_kib": 2048, "before": 0, "owner": "x"}\n{"seq": 2, "o')
    code, out, err = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert code == 0 and "node 0: 2M hugepages back to 0" in out
    assert err.startswith(f"warning: {journal.JOURNAL}: the last line was cut mid-write")


def test_one_process_at_a_time(host: FakeHost) -> None:
    root = writable(host)
    with journal.Lock(root):
        with pytest.raises(HarnessError) as e, journal.Lock(root):
            pass
        assert "another vmharness process" in e.value.message
    with journal.Lock(root):  # released on exit
        pass


def test_no_lock_and_no_record_is_written_into_a_host_root(host: FakeHost) -> None:
    root = HostRoot(host.base)
    with pytest.raises(HarnessError, match="not the live host"):
        journal.Lock(root).__enter__()
    with pytest.raises(HarnessError, match="not the live host"):
        journal.record(root, {"op": "begin", "pid": 1})
    assert not (host.base / "run/vmharness").exists()


def test_empty_journal(cli, host: FakeHost) -> None:
    code, out, _ = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert (code, out.strip()) == (0, "nothing to restore: the journal is empty")


def test_released_records_are_not_undone_and_the_last_release_clears(host: FakeHost) -> None:
    root = writable(host)
    journal.record(root, {"op": "pages", "node": 0, "size_kib": 2048, "before": 0}, HP)
    overlay = journal.record(root, {"op": "file", "path": "/var/lib/vmharness/vms/g/overlay.qcow2", "ssh": None},
                             "vm:g")
    dom = journal.record(root, {"op": "domain", "uri": "qemu:///system", "uuid": "u", "name": "vmh-g"}, "vm:g")
    assert [r["op"] for r in restore.pending(root)] == ["domain", "file", "pages"]
    assert restore.describe(dom) == "guest vmh-g (qemu:///system): destroy and undefine"
    journal.release(root, [overlay["seq"], dom["seq"]])
    assert [r["op"] for r in restore.pending(root)] == ["pages"]
    assert root.exists(journal.JOURNAL)  # the pages are still out
    first = journal.read(root)[0]["seq"]
    journal.release(root, [first])
    assert not root.exists(journal.JOURNAL)


def test_a_journal_grown_past_one_mib_by_the_harness_is_read_back_and_restored(
        cli, host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two NICs' 520 vectors moved off a host of 1,024 CPUs whose IRQs were spread over every other one: 520
    records of 2.1 KiB, journaled by the harness's own call (irqs.pin), grow the journal past 1 MiB, the cap
    that refused it before (the pin failed at its 487th vector: its record could not read the journal back,
    and host-restore refused it). host-restore lists every record, then gives each IRQ back its CPUs and
    removes the journal."""
    monkeypatch.setattr(os, "fsync", lambda _fd: None)  # 9 ms each on this disk; durability is not the question
    spread = ",".join(str(c) for c in range(0, 1024, 2))
    nics = ("0000:b3:00.0", "0000:b3:00.1")
    for n in range(520):
        host.interrupt(100 + n, f"vfio-msix[{n // 2}]({nics[n % 2]})", spread)
    root = writable(host)
    made, _ = irqs.pin(root, irqs.vfio(root, nics), (11,), "host-prepare")
    assert len(made) == 520 and root.path(journal.JOURNAL).stat().st_size > 1 << 20
    code, out, _ = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert code == 0 and out.count("IRQ ") == 520, out[-300:]
    assert restore.undo(root, lambda _line: None) == []
    assert not root.exists(journal.JOURNAL)
    assert all(root.read_text(irqs.affinity_path(100 + n)).strip() == spread for n in (0, 255, 519))


def test_a_release_leaves_the_journal_holding_what_is_outstanding_alone(host: FakeHost) -> None:
    """Released records go from the file (a long study on a host kept prepared grew it by every run's); the
    numbers go on from the highest given, hand-overs are kept as the records' owners, and the rest restores."""
    root = writable(host)
    pages = journal.record(root, {"op": "pages", "node": 0, "size_kib": 2048, "before": 0}, "run:1")
    journal.hand_over(root, [pages["seq"]], HP)
    for run in range(50):
        seqs = [journal.record(root, {"op": "pages", "node": i, "size_kib": 2048, "before": 0}, f"run:{run}")["seq"]
                for i in range(3)]
        journal.release(root, seqs)
    lines = root.path(journal.JOURNAL).read_text().splitlines()
    assert len(lines) == 2, lines  # the pages, and a marker holding the highest number: 1 + 1 + 50 * (3 + 1)
    kept = [(r["seq"], r["op"], r.get("owner")) for r in journal.read(root)]
    assert kept == [(1, "pages", HP), (202, "released", None)]
    assert journal.record(root, {"op": "begin", "pid": 1})["seq"] == 203
    assert [r["seq"] for r in restore.pending(root)] == [1]


def test_a_change_that_would_take_the_journal_past_its_cap_is_refused_before_it_is_made(
        host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    root = writable(host)
    journal.record(root, {"op": "pages", "node": 0, "size_kib": 2048, "before": 0}, HP)
    size = root.path(journal.JOURNAL).stat().st_size
    monkeypatch.setattr(journal, "MAX_JOURNAL", size + 10)
    with pytest.raises(HarnessError, match="refusing to make another"):
        journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0}, HP)
    assert root.path(journal.JOURNAL).stat().st_size == size
    with pytest.raises(RuntimeError, match="could not be read back"):
        journal.record(root, {"op": "begin", "pid": "9" * (70 << 10)})
