"""The journal and the lock, on a writable synthetic root."""

from __future__ import annotations

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.host import journal, restore
from vmharness.host.root import HostRoot


def test_records_are_numbered_and_a_torn_line_is_dropped(host: FakeHost) -> None:
    root = HostRoot(host.base, allow_writes=True)
    journal.record(root, {"op": "begin", "pid": 1})
    journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0})
    with open(root.path(journal.JOURNAL), "a") as f:
        f.write('{"op": "bind", "bdf": "00')  # killed mid-write
    recs = journal.read(root)
    assert [(r["seq"], r["op"]) for r in recs] == [(1, "begin"), (2, "pages")]


def test_restore_plan_is_newest_first(cli, host: FakeHost) -> None:
    root = HostRoot(host.base, allow_writes=True)
    journal.record(root, {"op": "begin", "pid": 1})
    journal.record(root, {"op": "modules", "names": ["vfio-pci"], "loaded_before": []})
    journal.record(root, {"op": "bind", "bdf": "0000:81:00.0", "driver": "e1000e", "override": None})
    journal.record(root, {"op": "bind", "bdf": "0000:81:00.1", "driver": None, "override": "pci-stub"})
    journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0})
    journal.record(root, {"op": "mount", "path": "/run/vmharness/hugepages-2M", "created": True})
    assert [r["op"] for r in restore.pending(root)] == ["mount", "pages", "bind", "bind", "modules"]
    code, out, _ = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        "host-restore plan (in undo order)",
        "  unmount /run/vmharness/hugepages-2M and remove it",
        "  node 1: 2M hugepages back to 0",
        "  0000:81:00.0: back to e1000e (driver_override cleared)",
        "  0000:81:00.1: back to no driver (driver_override pci-stub)",
        "  unload the modules loaded since: vfio-pci and their dependencies",
    ]


def test_one_process_at_a_time(host: FakeHost) -> None:
    root = HostRoot(host.base, allow_writes=True)
    with journal.Lock(root):
        with pytest.raises(HarnessError) as e, journal.Lock(root):
            pass
        assert "another vmharness process" in e.value.message
    with journal.Lock(root):  # released on exit
        pass


def test_empty_journal(cli, host: FakeHost) -> None:
    code, out, _ = cli("host-restore", "--host-root", str(host.base), "--dry-run")
    assert (code, out.strip()) == (0, "nothing to restore: the journal is empty")


def test_released_records_are_not_undone_and_the_last_release_clears(host: FakeHost) -> None:
    root = HostRoot(host.base, allow_writes=True)
    journal.record(root, {"op": "pages", "node": 0, "size_kib": 2048, "before": 0})
    overlay = journal.record(root, {"op": "file", "path": "/v/g/overlay.qcow2", "ssh": None})
    dom = journal.record(root, {"op": "domain", "uri": "qemu:///system", "uuid": "u", "name": "vmh-g"})
    assert [r["op"] for r in restore.pending(root)] == ["domain", "file", "pages"]
    assert restore.describe(dom) == "guest vmh-g (qemu:///system): destroy and undefine"
    journal.release(root, [overlay["seq"], dom["seq"]])
    assert [r["op"] for r in restore.pending(root)] == ["pages"]
    assert root.exists(journal.JOURNAL)  # the pages are still out
    first = journal.read(root)[0]["seq"]
    journal.release(root, [first])
    assert not root.exists(journal.JOURNAL)
