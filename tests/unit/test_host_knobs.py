"""Host knobs per instance ([instance.host], issue 26) on synthetic host trees: read and checked from the
configuration; checked on the host (present, writable now, a value it can be given back to); set,
read back, journaled before each write, given back after the guest, on error, on a signal and by
host-restore; and a journal left by a SIGKILL after each step undone to the very same tree."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.experiment import ops, preflight
from vmharness.guest import instance, session, vm
from vmharness.host.prepare import knobs
from vmharness.journal import journal
from vmharness.model import config, hostknobs, sections
from vmharness.signals import Interrupted
from vmharness.system.root import HostRoot

OWNER = "run:20260101-000000-abcd"
PARAMS = "sys/module/kvm/parameters"
CPU = "sys/devices/system/cpu"


class Kernel(HostRoot):
    """A writable tree that answers writes as the kernel does: nx_huge_pages reads Y or N (and refuses
    other words with EIO), smt/control switches the sibling threads off and on, and a parameter in
    `ignored` keeps its value whatever is written. Each reads with a newline, as sysfs does."""

    def __init__(self, base: Path) -> None:
        super().__init__(base, allow_writes=True)
        self.ignored: set[str] = set()

    def write_text(self, p: str | Path, text: str) -> None:
        p = str(p)
        if p in self.ignored:
            return
        if p.endswith("/nx_huge_pages"):
            words = {"force": "Y", "off": "N", "auto": "N", "Y": "Y", "N": "N"}
            if text not in words:
                raise HarnessError(f"the kernel refused {text!r} -> {p}: Input/output error")
            text = words[text]
        if p == knobs.SMT_CONTROL:
            super().write_text(knobs.ONLINE, "0-3\n" if text == "on" else "0-1\n")
        super().write_text(p, text + "\n")  # read back as sysfs shows it


def kvm_host(tmp_path: Path) -> FakeHost:
    """Four CPUs, two cores of two threads (0 and 2, 1 and 3), kvm loaded, no kvm_intel."""
    h = FakeHost(tmp_path / "root", nodes=1, cpus_per_node=4)
    for name, value in (("nx_huge_pages", "N"), ("nx_huge_pages_recovery_ratio", "60"),
                        ("nx_huge_pages_recovery_period_ms", "0"), ("mitigate_smt_rsb", "N")):
        h.write(f"{PARAMS}/{name}", value + "\n")
    h.p(f"{PARAMS}/mitigate_smt_rsb").chmod(0o444)
    h.write(f"{CPU}/smt/control", "on\n")
    h.write(f"{CPU}/vulnerabilities/itlb_multihit", "Not affected\n")
    for cpu in range(4):
        h.write(f"{CPU}/cpu{cpu}/topology/thread_siblings_list", f"{cpu % 2},{cpu % 2 + 2}\n")
    return h


def tree(base: Path) -> dict[str, tuple[str, int]]:
    """Every file of the tree outside the journal's folder: its text and mode."""
    return {str(p.relative_to(base)): (p.read_text(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(base.rglob("*")) if p.is_file() and "run/vmharness" not in str(p)}


def kernel(h: FakeHost) -> Kernel:
    return Kernel(h.base)


def read(h: FakeHost, rel: str) -> str:
    return h.p(rel).read_text().strip()


def run_cfg(tmp_path: Path, body: str) -> sections.RunConfig:
    path = tmp_path / "r.toml"
    path.write_text('[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n' + body)
    return config.load_run(path)


KNOBS = hostknobs.Knobs({"smt": "off", "kvm.nx_huge_pages": "force", "kvm.nx_huge_pages_recovery_ratio": 30})


# the configuration -------------------------------------------------------------------------------
def test_dotted_and_quoted_keys_read_the_same_and_a_manifest_reads_back_the_same(tmp_path: Path) -> None:
    dotted = run_cfg(tmp_path, '[instance.host]\nsmt = "off"\nkvm.nx_huge_pages = "force"\n'
                     "kvm.nx_huge_pages_recovery_ratio = 30\n")
    quoted = run_cfg(tmp_path, '[instance.host]\nsmt = "off"\n"kvm.nx_huge_pages" = "force"\n'
                     '"kvm.nx_huge_pages_recovery_ratio" = 30\n')
    assert dotted == quoted and dotted.instance[1].host == KNOBS and dotted.instance[0].host == {}
    again = config.run_from_json(json.loads(json.dumps(dotted.to_json())))
    assert again == dotted and hash(again.instance[1]) == hash(dotted.instance[1])


@pytest.mark.parametrize(("body", "said"), [
    ('kvm.bogus = 1', "unknown host knob kvm.bogus"),
    ('smt = "forceoff"', "must be on or off"),
    ('kvm.nx_huge_pages = "forced"', "must be force, off or auto"),
    ('kvm.nx_huge_pages = "never"', "'never' is refused"),
    ("kvm.nx_huge_pages = true", "must be force, off or auto"),
    ("kvm.nx_huge_pages_recovery_ratio = -1", "whole number from 0"),
    ("kvm.nx_huge_pages_recovery_ratio = 4294967296", "whole number from 0"),
    ('kvm.nx_huge_pages_recovery_period_ms = "10"', "whole number from 0"),
    ("kvm.nx_huge_pages_recovery_ratio = true", "whole number from 0"),
    ('kvm_intel.vmentry_l1d_flush = "sometimes"', "must be always, cond or never"),
    ("kvm.mitigate_smt_rsb = true", "must be Y or N"),
    ('kvm_amd.npt = "off"', "must be Y or N"),
    ("kvm_amd.nested = 0", "must be 0 or 1"),
    ("kvm.a.b = 1", "is a table"),
    ('kvm.nx_huge_pages = "off"\n"kvm.nx_huge_pages" = "force"', "given twice"),
])
def test_a_knob_the_harness_does_not_take_is_refused_naming_it(tmp_path: Path, body: str, said: str) -> None:
    with pytest.raises(HarnessError) as err:
        run_cfg(tmp_path, "[instance.host]\n" + body + "\n")
    assert said in err.value.message and "config.instance[1].host" in err.value.message, err.value.message
    assert err.value.hint


def test_host_knobs_are_a_guests_setting_only(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[instance]]\nname = "a"\n[instance.host]\nsmt = "off"\n')
    with pytest.raises(HarnessError, match="instance a: host is a guest's setting"):
        config.load(path)


def test_instances_that_differ_only_in_host_knobs_each_boot_their_own_guest(tmp_path: Path) -> None:
    from vmharness.experiment import boots
    cfg = run_cfg(tmp_path, '[instance.host]\nkvm.nx_huge_pages = "force"\n')
    assert boots.rides(cfg) == {}  # b boots its own guest, after its knobs are set


# checked on the host -----------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "knob", "said"), [
    (lambda h: h.p(f"{PARAMS}/nx_huge_pages_recovery_period_ms").unlink(), "kvm.nx_huge_pages_recovery_period_ms",
     "not present on this host"),
    (lambda h: None, "kvm_intel.vmentry_l1d_flush", "not present on this host"),
    (lambda h: h.p(f"{PARAMS}/nx_huge_pages").chmod(0o444), "kvm.nx_huge_pages", "is read only (mode 444)"),
    (lambda h: h.write(f"{CPU}/smt/control", "notsupported\n"), "smt", "SMT cannot be switched"),
    (lambda h: h.write(f"{CPU}/smt/control", "forceoff\n"), "smt", "SMT cannot be switched"),
    (lambda h: h.write("sys/module/kvm_intel/parameters/vmentry_l1d_flush", "not required\n"),
     "kvm_intel.vmentry_l1d_flush", "KVM ignores it here"),
    (lambda h: h.write(f"{PARAMS}/nx_huge_pages", "Y\x1b[2J\n"), "kvm.nx_huge_pages", "does not know"),
])
def test_a_knob_the_host_cannot_take_now_is_refused_naming_instance_and_key(tmp_path: Path, change, knob: str,
                                                                             said: str) -> None:
    h = kvm_host(tmp_path)
    change(h)
    value = {"smt": "off", "kvm_intel.vmentry_l1d_flush": "always"}.get(knob, 5 if "recovery" in knob else "force")
    for root in (HostRoot(h.base), kernel(h)):  # a snapshot answers as the live host does
        with pytest.raises(HarnessError) as err:
            knobs.plan(root, "b", {knob: value})
        assert err.value.message.startswith(f"instance b: host.{knob}: ") and said in err.value.message
        assert err.value.hint
    before = tree(h.base)
    with pytest.raises(HarnessError):
        knobs.apply(kernel(h), "b", {knob: value}, OWNER, print)
    assert tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_the_preview_says_what_each_instance_would_set_and_what_smt_off_takes(tmp_path: Path) -> None:
    h = kvm_host(tmp_path)
    line = knobs.preview(HostRoot(h.base), "b", KNOBS)
    assert "smt = off (reads on now, taking CPUs 2-3 offline)" in line
    assert "kvm.nx_huge_pages = force (reads N now)" in line and "ratio = 30 (reads 60 now)" in line
    assert knobs.preview(HostRoot(h.base), "a", {}) == ""


# set, read back, journaled, given back -----------------------------------------------------------
def test_knobs_are_journaled_before_they_are_written_read_back_and_given_back(tmp_path: Path) -> None:
    h = kvm_host(tmp_path)
    before = tree(h.base)
    root = kernel(h)
    seen: list[tuple[str, str]] = []
    write = root.write_text

    def spy(p: str | Path, text: str) -> None:  # each write comes after its record
        recs = journal.read(root)
        assert recs and recs[-1]["path"] == str(p) and recs[-1]["before"] == root.read_optional(p)
        seen.append((str(p), text))
        write(p, text)

    root.write_text = spy  # type: ignore[method-assign]
    applied = knobs.apply(root, "b", KNOBS, OWNER, print)
    root.write_text = write  # type: ignore[method-assign]
    assert read(h, f"{PARAMS}/nx_huge_pages") == "Y" and read(h, f"{PARAMS}/nx_huge_pages_recovery_ratio") == "30"
    assert read(h, f"{CPU}/smt/control") == "off" and read(h, f"{CPU}/online") == "0-1"
    assert applied.smt_taken == (2, 3) and applied.report["smt"]["cpus_taken"] == "2-3"
    assert applied.report["kvm.nx_huge_pages"] == {"before": "N", "set": "force", "reads": "Y"}
    assert [r["owner"] for r in journal.read(root)] == [OWNER] * 3
    assert len(seen) == 3 and seen[0] == ("/sys/devices/system/cpu/smt/control", "off")
    assert knobs.give_back(root, applied, print) == []
    assert tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_a_value_the_kernel_did_not_take_is_an_error_and_what_was_set_is_given_back(tmp_path: Path) -> None:
    h = kvm_host(tmp_path)
    before = tree(h.base)
    root = kernel(h)
    root.ignored = {f"/{PARAMS}/nx_huge_pages_recovery_ratio"}
    with pytest.raises(HarnessError) as err:
        knobs.apply(root, "b", KNOBS, OWNER, print)
    assert "instance b: host.kvm.nx_huge_pages_recovery_ratio: the kernel did not take '30'" in err.value.message
    assert "reads '60'" in err.value.message
    assert tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_a_write_the_kernel_refuses_gives_back_the_knobs_set_before_it(tmp_path: Path, monkeypatch) -> None:
    h = kvm_host(tmp_path)
    before = tree(h.base)
    monkeypatch.setattr(knobs, "_step", lambda root, inst, key, value: knobs.Step(
        key, knobs.path_of(key), "bogus" if key == "kvm.nx_huge_pages" else str(value),
        root.read_optional(knobs.path_of(key)) or ""))
    with pytest.raises(HarnessError, match="refused 'bogus'"):
        knobs.apply(kernel(h), "b", KNOBS, OWNER, print)
    assert tree(h.base) == before


def test_smt_off_that_takes_a_planned_cpu_is_refused_naming_the_cpus(tmp_path: Path) -> None:
    h = kvm_host(tmp_path)
    applied = knobs.apply(kernel(h), "b", {"smt": "off"}, OWNER, print)
    knobs.check_placement("b", applied, (0, 1))
    with pytest.raises(HarnessError, match=r"instance b: host.smt = off took CPUs 2-3 offline"):
        knobs.check_placement("b", applied, (0, 1, 2, 3))


def test_host_restore_gives_back_what_a_run_left(tmp_path: Path) -> None:
    h = kvm_host(tmp_path)
    before = tree(h.base)
    root = kernel(h)
    knobs.apply(root, "b", KNOBS, OWNER, print)
    assert read(h, f"{CPU}/smt/control") == "off"
    assert ops.undo_all(root, print) == []
    assert tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_a_module_unloaded_since_leaves_nothing_to_give_back(tmp_path: Path) -> None:
    h = kvm_host(tmp_path)
    root = kernel(h)
    knobs.apply(root, "b", {"kvm.nx_huge_pages": "force"}, OWNER, print)
    h.p(f"{PARAMS}/nx_huge_pages").unlink()
    assert ops.undo_all(root, print) == [] and not h.p(journal.JOURNAL).exists()


@pytest.mark.parametrize("at", range(6))  # three knobs, each: killed after its record, after its write
def test_a_sigkill_after_each_step_then_host_restore_leaves_the_tree_identical(tmp_path: Path, at: int) -> None:
    h = kvm_host(tmp_path)
    before = tree(h.base)
    root = kernel(h)
    pid = os.fork()
    if pid == 0:  # the run, killed at step `at`
        steps = [0]
        record, write = journal.record, root.write_text

        def step() -> None:
            if steps[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
            steps[0] += 1

        def record_then(*a, **k):
            out = record(*a, **k)
            step()
            return out

        def write_then(p: str | Path, text: str) -> None:
            write(p, text)
            if p != knobs.ONLINE:
                step()

        journal.record = record_then
        root.write_text = write_then  # type: ignore[method-assign]
        try:
            knobs.apply(root, "b", KNOBS, OWNER, lambda _l: None)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert len(journal.outstanding(journal.read(root))) == at // 2 + 1
    assert ops.undo_all(root, lambda _l: None) == []
    assert tree(h.base) == before and not h.p(journal.JOURNAL).exists()


@pytest.mark.parametrize("path", ["/etc/shadow", "/sys/module/kvm/parameters/../../../../etc/passwd",
                                  "/sys/module/e1000e/parameters/debug", "/sys/devices/system/cpu/online"])
def test_a_journal_record_naming_another_file_is_damage_never_written(tmp_path: Path, path: str) -> None:
    h = kvm_host(tmp_path)
    root = kernel(h)
    h.write(journal.JOURNAL, json.dumps({"seq": 1, "op": "hostknob", "path": path, "before": "on",
                                         "owner": OWNER}) + "\n")
    with pytest.raises(HarnessError, match="is damaged: line 1 is a 'hostknob' record whose path"):
        ops.undo_all(root, print)


# the guest's session: set before the boot, given back after it, on error and on a signal ---------------------
@pytest.mark.parametrize("failure", [HarnessError("no image"), Interrupted(signal.SIGTERM)])
def test_a_boot_that_fails_or_is_interrupted_gives_the_knobs_back(tmp_path: Path, monkeypatch,
                                                                  failure: BaseException) -> None:
    h = kvm_host(tmp_path)
    before = tree(h.base)
    root = kernel(h)
    cfg = run_cfg(tmp_path, '[instance.host]\nsmt = "off"\nkvm.nx_huge_pages = "force"\n')
    seen: list[str] = []

    def plan(*_a, **_k):
        seen.append(read(h, f"{PARAMS}/nx_huge_pages") + read(h, f"{CPU}/smt/control"))
        raise failure

    monkeypatch.setattr(instance, "plan", plan)
    with pytest.raises(type(failure)):
        session.boot(root, cfg, cfg.instance[1], None, print, OWNER)
    assert seen == ["Yoff"]  # set before the guest is planned and booted
    assert tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_shutdown_gives_the_knobs_back_after_the_guest_is_down(tmp_path: Path, monkeypatch) -> None:
    h = kvm_host(tmp_path)
    before = tree(h.base)
    root = kernel(h)
    cfg = run_cfg(tmp_path, "")
    applied = knobs.apply(root, "b", KNOBS, OWNER, print)
    order: list[str] = []
    monkeypatch.setattr(vm, "down", lambda *_a, **_k: order.append(read(h, f"{CPU}/smt/control")))
    session.shutdown(root, None, None, cfg, print, applied)  # type: ignore[arg-type]
    assert order == ["off"] and tree(h.base) == before


def test_a_snapshot_keeps_which_knobs_are_writable_and_what_smt_off_would_take(tmp_path: Path) -> None:
    import tarfile

    from vmharness.cli.main import main
    h = kvm_host(tmp_path)
    h.p(f"{PARAMS}/nx_huge_pages_recovery_period_ms").chmod(0o444)
    assert main(["host-snapshot", "--host-root", str(h.base), str(tmp_path / "s.tar.gz")]) == 0
    with tarfile.open(tmp_path / "s.tar.gz") as tar:
        tar.extractall(tmp_path / "snap", filter="tar")
    snap = HostRoot.open(tmp_path / "snap")
    assert "taking CPUs 2-3 offline" in knobs.preview(snap, "b", {"smt": "off", "kvm.nx_huge_pages": "auto"})
    with pytest.raises(HarnessError, match="is read only"):
        knobs.plan(snap, "b", {"kvm.nx_huge_pages_recovery_period_ms": 10})


def test_host_prepare_dry_run_shows_each_instances_knobs_on_a_snapshot(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from vmharness.cli import main as cli
    h = kvm_host(tmp_path)
    before = tree(h.base)
    study = tmp_path / "r.toml"
    study.write_text('[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n[instance.host]\nsmt = "off"\n'
                     'kvm.nx_huge_pages = "force"\n')
    argv = ["host-prepare", "--dry-run", "--hugepages", "64M", "--host-root", str(h.base), "--config", str(study)]
    assert cli.main(argv) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[-1] == ("host knobs of b, set before its guest boots and given back after it: smt = off (reads on "
                        "now, taking CPUs 2-3 offline); kvm.nx_huge_pages = force (reads N now)")
    assert cli.main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_knobs"] == {"b": [
        {"knob": "smt", "value": "off", "now": "on"}, {"knob": "kvm.nx_huge_pages", "value": "force", "now": "N"}]}
    study.write_text('[[instance]]\nname = "a"\n')
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"host knobs: no instance in {study} sets any"
    assert tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_print_xml_places_an_smt_off_instance_on_the_cpus_smt_off_leaves(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`run --print-xml` shows each guest where the run will place it: SMT off takes CPUs 2-3 away
    before b boots, so b's vCPUs and QEMU's threads are pinned on 0-1 (the run plans once it is off and
    check_placement refuses the rest); a, which leaves SMT on, keeps the CPUs it has."""
    from vmharness.cli import main as cli
    h = kvm_host(tmp_path)
    before = tree(h.base)
    study = tmp_path / "r.toml"
    study.write_text('[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n[instance.host]\nsmt = "off"\n')
    assert cli.main(["run", str(study), "--print-xml", "--host-root", str(h.base)]) == 0
    out, err = capsys.readouterr()
    xml_a, xml_b = out.split("<!-- instance b -->")
    pinned = {name: set(re.findall(r"cpuset=['\"]([0-9,-]+)['\"]", xml)) for name, xml in (("a", xml_a), ("b", xml_b))}
    assert pinned == {"a": {"0", "1", "2"}, "b": {"0", "1", "0,1"}}, pinned
    assert "note: b: host.smt = off takes CPUs 2-3 offline before its guest boots: the guest is placed on the " \
           "CPUs left" in err
    study.write_text('[guest]\nvcpus = 3\n[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n[instance.host]\n'
                     'smt = "off"\n')
    with pytest.raises(HarnessError, match=r"instance b: host.smt = off takes CPUs 2-3 offline before its guest "
                                           r"boots, and then: 3 vCPUs but node 0 has 2 CPUs"):
        list(preflight.domains(kernel(h), config.load_run(study), None))
    assert tree(h.base) == before
