"""The host's state in every result: read from fake host trees (HostRoot over a tmp dir), recorded at a
run's start and end, warned of when it changed during the run, and shown first by `report` and
`compare` when two runs were made on different boots of the host."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests import hostile_kit
from vmharness.analysis import hostdiff, report, saturation
from vmharness.errors import HarnessError
from vmharness.experiment import hostrecord
from vmharness.host.inspect import hoststate
from vmharness.rundir.store import RunDir
from vmharness.system.root import HostRoot

CPU = "sys/devices/system/cpu"


def tree(base: Path, *, boot: str = "b-1", cmdline: str = "quiet", microcode: str | None = "0xa0011d1",
         smt: str = "on", mds: str = "Not affected", nx: str = "N", extra: dict[str, str] | None = None) -> HostRoot:
    files = {"proc/sys/kernel/random/boot_id": boot, "proc/cmdline": cmdline,
             f"{CPU}/smt/control": smt, f"{CPU}/smt/active": "1" if smt == "on" else "0",
             f"{CPU}/vulnerabilities/mds": mds, f"{CPU}/vulnerabilities/spectre_v2": "Mitigation: Retpolines",
             "sys/module/kvm/parameters/nx_huge_pages": nx, "sys/module/kvm/parameters/halt_poll_ns": "200000",
             "sys/module/kvm_amd/parameters/nested": "1", "sys/module/kvmgt/parameters/x": "not kvm's",
             "sys/module/vfio/parameters/enable_unsafe_noiommu_mode": "N", **(extra or {})}
    files |= {"etc/machine-id": "0123abcd", "proc/sys/kernel/hostname": "lab1"}
    files["proc/cpuinfo"] = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7713\n" + (
        f"microcode\t: {microcode}\n" if microcode else "") + "flags\t\t: fpu\n\n"
    for rel, text in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text + "\n")
    return HostRoot(base)


def test_the_state_holds_every_fact_the_run_records(tmp_path: Path) -> None:
    state = hoststate.read(tree(tmp_path))
    assert state == {
        "boot_id": "b-1", "cmdline": "quiet", "microcode": "0xa0011d1", "smt": {"control": "on", "active": "1"},
        "vulnerabilities": {"mds": "Not affected", "spectre_v2": "Mitigation: Retpolines"},
        "kvm": {"kvm.halt_poll_ns": "200000", "kvm.nx_huge_pages": "N", "kvm_amd.nested": "1"},
        "machine_id": "0123abcd", "hostname": "lab1", "cpu_model": "AMD EPYC 7713"}
    assert sorted(state) == sorted(hoststate.KEYS)


def test_microcode_from_sysfs_where_cpuinfo_has_none_and_missing_facts_are_null(tmp_path: Path) -> None:
    root = tree(tmp_path, microcode=None, extra={f"{CPU}/cpu0/microcode/version": "0x2b000603"})
    assert hoststate.read(root)["microcode"] == "0x2b000603"
    empty = hoststate.read(HostRoot(tmp_path / "nothing"))
    assert empty == {"boot_id": None, "cmdline": None, "microcode": None, "smt": {"control": None, "active": None},
                     "vulnerabilities": {}, "kvm": {}, "machine_id": None, "hostname": None, "cpu_model": None}


def test_a_parameter_that_is_not_a_regular_file_is_null_and_never_opened(tmp_path: Path) -> None:
    root = tree(tmp_path)
    os.mkfifo(tmp_path / "sys/module/kvm/parameters/fifo")
    (tmp_path / "sys/module/kvm/parameters/dir").mkdir()
    kvm = hoststate.read(root)["kvm"]
    assert kvm["kvm.fifo"] is None and kvm["kvm.dir"] is None and kvm["kvm.nx_huge_pages"] == "N"


def test_the_differences_name_each_fact_the_boot_first(tmp_path: Path) -> None:
    a = hoststate.read(tree(tmp_path / "a"))
    b = hoststate.read(tree(tmp_path / "b", boot="b-2", cmdline="quiet mitigations=off", smt="off", nx="Y"))
    assert list(hoststate.differences(a, b).values()) == [
        "boot b-1 -> b-2", "cmdline: 'quiet' -> 'quiet mitigations=off'", "smt.active: '1' -> '0'",
        "smt.control: 'on' -> 'off'", "kvm.nx_huge_pages: 'N' -> 'Y'"]
    assert hoststate.differences(a, a) == {}


def test_the_run_records_start_and_end_and_says_a_change(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {"kind": "run", "config": {"instance": [{"name": "a"}]}})
    said: list[str] = []
    hostrecord.start(run, tree(tmp_path / "h"), "qemu:///system")
    first = run.manifest["host_state"]["start"]
    hostrecord.start(run, tree(tmp_path / "h", nx="Y"), "qemu:///system")  # a resumed run keeps its start
    assert run.manifest["host_state"]["start"] == first
    hostrecord.end(run, tree(tmp_path / "h", nx="Y"), "qemu:///system", said.append)
    assert run.manifest["host_state"]["end"]["kvm"]["kvm.nx_huge_pages"] == "Y"
    assert said == ["WARNING: the host changed during the run: kvm.nx_huge_pages: 'N' -> 'Y'"]
    assert hostdiff.run_flags(RunDir.open(run.path)) == [
        "the host changed during the run: kvm.nx_huge_pages: 'N' -> 'Y'"]


def test_guests_on_another_machine_leave_this_hosts_state_out(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {"kind": "run", "config": {"instance": [{"name": "a"}]}})
    hostrecord.start(run, tree(tmp_path / "h"), "qemu+ssh://far/system")
    assert "host_state" not in run.manifest


def folder(path: Path, state: dict[str, Any] | None, end: dict[str, Any] | None = None) -> RunDir:
    manifest = json.loads(hostile_kit.GOOD_MANIFEST)
    if state is not None:
        manifest["host_state"] = {"start": state, "end": end if end is not None else state}
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "records.jsonl").write_text(hostile_kit.GOOD_RECORDS)
    return RunDir.open(path)


def test_compare_of_two_boots_shows_the_hosts_differences_first(tmp_path: Path) -> None:
    one = folder(tmp_path / "r1", hoststate.read(tree(tmp_path / "h1")))
    two = folder(tmp_path / "r2", hoststate.read(tree(tmp_path / "h2", boot="b-2", mds="Vulnerable",
                                                      microcode="0xa0011d5")))
    text = report.text(saturation.compare([one, two])).splitlines()
    assert text[0] == ("WARNING: host: r2 ran on another boot of the host than r1: microcode: '0xa0011d1' -> "
                       "'0xa0011d5'; vulnerability mds: 'Not affected' -> 'Vulnerable'")
    assert text[1].startswith("  do: compare runs measured on one host state")  # it voids the answer: said first
    assert text[2].startswith("WARNING: this comparison mixes host changes nobody named (boot, microcode, "
                              "vulnerability mds)")
    alike = report.text(saturation.compare([one, folder(tmp_path / "r3", hoststate.read(tree(tmp_path / "h1")))]))
    assert "host" not in alike.splitlines()[0]
    json_form = report.to_json(saturation.compare([one, two]))
    assert json_form["warnings"][0].startswith("host: r2 ran on another boot")


def test_a_reboot_alone_is_said_and_an_old_folder_beside_a_new_one_is_named(tmp_path: Path) -> None:
    one = folder(tmp_path / "r1", hoststate.read(tree(tmp_path / "h1")))
    two = folder(tmp_path / "r2", hoststate.read(tree(tmp_path / "h2", boot="b-9")))
    old = folder(tmp_path / "old", None)
    flags = saturation.compare([one, two, old]).flags
    assert flags[:3] == ["old: no record of its host's state (made before host_state was recorded): its host "
                         "cannot be compared",
                         "host: r2 ran on another boot of the host than r1: nothing else differs",
                         "this comparison mixes host changes nobody named (boot): a difference between these runs "
                         "may be the host's, not the instances'"]


def test_old_folders_report_as_before(tmp_path: Path) -> None:
    old, older = folder(tmp_path / "a", None), folder(tmp_path / "b", None)
    assert hostdiff.compare_flags([old, older]) == [] and hostdiff.run_flags(old) == []


def test_a_change_during_the_run_and_a_resume_after_a_reboot_come_first_in_report(tmp_path: Path) -> None:
    start = hoststate.read(tree(tmp_path / "h1"))
    run = folder(tmp_path / "r", start, hoststate.read(tree(tmp_path / "h2", boot="b-2", smt="off")))
    flags = saturation.analyse(run).flags
    assert flags[0] == ("the host changed during the run (it booted again: a resumed run): boot b-1 -> b-2; "
                        "smt.active: '1' -> '0'; smt.control: 'on' -> 'off'")


@pytest.mark.parametrize(("damage", "says"), [
    ("[]", "host_state is damaged: not an object"),
    ('{"start": 3}', "host_state.start is damaged: not an object"),
    ('{"start": {"kvm": []}}', "host_state.start.smt is damaged: not a table of strings"),
    ('{"start": {"cmdline": 5, "smt": {}, "vulnerabilities": {}, "kvm": {}}}',
     "host_state.start.cmdline is damaged: not a string (a int)"),
])
def test_a_damaged_state_is_named_by_file_and_key(tmp_path: Path, damage: str, says: str) -> None:
    run = folder(tmp_path / "r", None)
    m = json.loads((run.path / "manifest.json").read_text())
    (run.path / "manifest.json").write_text(json.dumps({**m, "host_state": json.loads(damage)}))
    with pytest.raises(HarnessError) as err:
        hostdiff.run_flags(run)
    assert says in err.value.message and str(run.path / "manifest.json") in err.value.message
