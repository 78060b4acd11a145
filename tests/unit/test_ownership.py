"""Exact identity: what the harness takes carries its owner, a later run gives back exactly what a
dead run left and nothing else, servers and folders are found by their exact name, and commands that
change the live host refuse a host root."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.bench import server, sweep
from vmharness.errors import HarnessError
from vmharness.experiment import hostprep
from vmharness.host.prepare import kmod
from vmharness.journal import files, journal, restore
from vmharness.model import config
from vmharness.rundir.store import RunDir
from vmharness.system.machine import Machine
from vmharness.system.root import HostRoot

DEAD, ALIVE = "run:0000000001", "run:0000000002"


def _file(root: HostRoot, owner: str, name: str) -> int:
    path = f"{files.VM_DIR}/nonexistent-vmh-test-{name.replace(':', '-')}/overlay.qcow2"  # where overlays go
    seq: int = journal.record(root, {"op": "file", "path": path, "ssh": None}, owner)["seq"]
    return seq


def test_a_later_run_reclaims_what_dead_runs_left_and_nothing_that_is_kept(host: FakeHost) -> None:
    root = HostRoot(host.base, allow_writes=True)
    kept = {_file(root, owner, owner) for owner in ("host-prepare", "vm:demo", "tune")}
    _file(root, DEAD, "a")
    _file(root, ALIVE, "b")
    said: list[str] = []
    assert restore.reclaim(root, said.append) == []
    assert said[0] == f"giving back 2 things that an interrupted run left (owners {DEAD}, {ALIVE})"
    assert {r["seq"] for r in restore.pending(root)} == kept
    assert restore.reclaim(root, said.append) == [] and len(said) == 3  # nothing more to say


def test_a_run_kept_with_keep_host_is_handed_to_host_prepare_and_not_reclaimed(host: FakeHost) -> None:
    root = HostRoot(host.base, allow_writes=True)
    since = max((r["seq"] for r in journal.read(root)), default=0)
    journal.record(root, {"op": "pages", "node": 0, "size_kib": 2048, "before": 0}, DEAD)
    journal.record(root, {"op": "mount", "path": "/run/vmharness/hugepages-2M", "created": False}, DEAD)
    own_guest = _file(root, DEAD, "overlay")  # not host preparation: stays the run's
    hostprep.keep_host(root, since, DEAD)
    assert {r["op"]: r["owner"] for r in journal.outstanding(journal.read(root))} == {
        "pages": "host-prepare", "mount": "host-prepare", "file": DEAD}
    said: list[str] = []
    assert restore.reclaim(root, said.append) == []
    assert [r["op"] for r in restore.pending(root)] == ["mount", "pages"]
    assert own_guest not in {r["seq"] for r in restore.pending(root)}


def test_module_undo_takes_only_what_the_harness_brought(host: FakeHost) -> None:
    root = HostRoot(host.base, allow_writes=True)
    modules = root.path("/proc/modules")
    modules.parent.mkdir(parents=True, exist_ok=True)
    modules.write_text(
        "vfio_pci 16384 0 - Live 0x0\n"
        "vfio_pci_core 94208 1 vfio_pci, Live 0x0\n"
        "vfio_iommu_type1 45056 0 - Live 0x0\n"
        "vfio 61440 3 vfio_pci,vfio_pci_core,vfio_iommu_type1, Live 0x0\n"
        "irqbypass 16384 2 vfio_pci_core,kvm, Live 0x0\n"  # was there before
        "kvm 1150976 0 - Live 0x0\n"  # was there before
        "dummy 16384 0 - Live 0x0\n")  # someone else loaded it meanwhile
    ours = kmod.brought_along(root, ["vfio-pci"], before={"irqbypass", "kvm"})
    assert ours == {"vfio_pci", "vfio_pci_core", "vfio"}
    assert kmod.brought_along(root, ["vfio_pci", "vfio_iommu_type1"], before={"irqbypass", "kvm"}) == {
        "vfio_pci", "vfio_pci_core", "vfio", "vfio_iommu_type1"}
    assert kmod.brought_along(root, ["vfio-pci"], before={"vfio_pci"}) == set()


@pytest.mark.parametrize("prefix", [
    "/tmp/vmharness-nginx-x/../../etc", "/etc/vmharness-nginx-x", "/tmp/nginx-x", "/tmp/vmharness-nginx-",
    "/tmp/vmharness-nginx-a b", "/tmp/vmharness-nginx-x/", "/tmp//vmharness-nginx-x", "tmp/vmharness-nginx-x",
    "/tmp/vmharness-nginx-x/y",
])
def test_a_server_folder_outside_tmp_or_not_ours_is_refused_before_any_rm(prefix: str) -> None:
    with pytest.raises(HarnessError, match="not a vmharness-nginx-"):
        server.check_prefix(prefix)


def test_a_server_folder_is_named_for_the_run_and_the_instance() -> None:
    assert server.prefix_for("0123456789", "a-b") == "/tmp/vmharness-nginx-0123456789-a-b"
    with pytest.raises(HarnessError):
        server.prefix_for("0123456789", "../../x")


def test_instance_b_is_never_measured_on_instance_a_b_s_server(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config.from_json({"instance": [{"name": "a-b"}, {"name": "b"}]})
    s = sweep.Sweep(cfg, RunDir.create(tmp_path / "r", {}), HostRoot(tmp_path), lambda _l: None, DEAD)
    started: list[str] = []
    monkeypatch.setattr(server.Server, "start", lambda self, root: started.append(self.cfg.prefix))
    monkeypatch.setattr(server.Server, "stop", lambda self, root, grace=10: None)
    monkeypatch.setattr(server, "check", lambda *a: {})
    first = s._serve("a-b", restart=False)
    assert s._serve("a-b", restart=False) is first
    second = s._serve("b", restart=False)
    assert second is not first and s.serving == "b"
    assert started == ["/tmp/vmharness-nginx-0000000001-a-b", "/tmp/vmharness-nginx-0000000001-b"]


@pytest.mark.parametrize(("argv", "env"), [
    (("run", "--host-root", "{snap}"), {}),
    (("bench", "--host-root", "{snap}"), {}),
    (("tune", "revert", "--host-root", "{snap}"), {}),
    (("tune", "apply", "--host-root", "{snap}"), {}),
    (("vm", "down", "x", "--host-root", "{snap}"), {}),
    (("bench",), {"VMHARNESS_HOST_ROOT": "{snap}"}),
    (("run",), {"VMHARNESS_HOST_ROOT": "{snap}"}),
])
def test_commands_that_change_the_live_host_refuse_a_host_root_and_write_nothing_in_it(
        cli, host: FakeHost, monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...], env: dict[str, str]) -> None:
    host.finish()
    before = sorted(p.relative_to(host.base) for p in host.base.rglob("*"))
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(snap=host.base))
    code, out, err = cli(*(a.format(snap=host.base) for a in argv))
    assert code == 2 and out == "", err
    first, hint = err.splitlines()
    assert "changes the live host" in first and ("--host-root" in first if not env else "VMHARNESS_HOST_ROOT" in first)
    assert hint.startswith("hint: drop --host-root")
    assert sorted(p.relative_to(host.base) for p in host.base.rglob("*")) == before


@pytest.mark.parametrize("form", ["master", "argv", "another prefix", "no pid file", "junk pid"])
def test_an_nginx_master_is_stopped_by_its_rewritten_command_line_and_by_its_prefix_only(form: str) -> None:
    """The stop (one command on the server's machine) stops the PID in the prefix's file only if its
    command line names exactly that prefix: as a master rewrites it (one string), or as started (words);
    the folder goes in every case."""
    prefix = f"/tmp/vmharness-nginx-{secrets.token_hex(5)}-b"
    named = prefix.replace("-b", "-a-b") if form == "another prefix" else prefix
    argv = {"master": ["bash", "-c", 'exec -a "$0" sleep 30', f"nginx: master process nginx -p {named}/ -c x"],
            }.get(form, [sys.executable, "-c", "import time; time.sleep(30)", "-p", f"{named}/"])
    child = subprocess.Popen(argv)
    try:
        os.mkdir(prefix)
        deadline = time.monotonic() + 10
        # until bash has exec'd: its own command line names the prefix too (in its last word), and a stop
        # that read it then left it alone (a clean clone's host stream failed [master] so, beside the rig)
        while (words := Path(f"/proc/{child.pid}/cmdline").read_text().split("\0"))[0] == "bash" or \
                f"{named}/" not in " ".join(words).split():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        if form != "no pid file":
            Path(prefix, "nginx.pid").write_text("12x4\n" if form == "junk pid" else f"{child.pid}\n")
        server._stop(Machine(), prefix, 5)
        if child.poll() is None:
            time.sleep(0.5)  # a process left alone stays; a stopped one is gone once reaped
        stopped = child.poll() is not None
        assert stopped == (form in ("master", "argv")), form
        assert not os.path.exists(prefix)
    finally:
        child.kill()
        child.wait()
