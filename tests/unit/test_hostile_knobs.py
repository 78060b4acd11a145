"""Host knobs ([instance.host]) that must be refused, tried through the real command
(tests/hostile_kit.py) on a snapshot: keys and values the harness does not take, and knob files a
host tree holds that cannot be set or hold what no kernel writes. Each case: exit 2, one `error:`
line naming the instance and key, one `hint:` line, no traceback, nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import hostile_kit
from tests.hostile_kit import Case, Outcomes, S, both, run_toml, snapshot_host

KVM = "snap/sys/module/kvm/parameters"
SMT = "snap/sys/devices/system/cpu/smt/control"
XML = ("run", "r.toml", "--print-xml", *S)
PREP = ("host-prepare", "--bdf", "0000:b3:00.0", "--dry-run", *S, "--config")


def _knob(body: str) -> hostile_kit.Build:
    return run_toml(f'[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n[instance.host]\n{body}\n')


def _kvm(mode: int = 0o644, **files: str) -> hostile_kit.Build:
    """The snapshot host with kvm's parameters (each file as given, in `mode`) and SMT control."""
    def build(cwd: Path) -> None:
        snapshot_host(cwd)
        values = {"nx_huge_pages": "N\n", "nx_huge_pages_recovery_ratio": "60\n", "smt": "on\n", **files}
        smt = values.pop("smt")
        for name, text in values.items():
            (cwd / KVM).mkdir(parents=True, exist_ok=True)
            (cwd / KVM / name).write_text(text)
            (cwd / KVM / name).chmod(mode)
        (cwd / "snap/sys/devices/system/cpu/smt").mkdir(parents=True, exist_ok=True)
        (cwd / "snap/sys/devices/system/cpu/smt/control").write_text(smt)
    return build


def _amd(refcnt: str) -> hostile_kit.Build:
    """kvm_amd loaded in the snapshot: npt read only at load, and its reference count."""
    def build(cwd: Path) -> None:
        base = cwd / "snap/sys/module/kvm_amd"
        (base / "parameters").mkdir(parents=True, exist_ok=True)
        (base / "parameters/npt").write_text("Y\n")
        (base / "parameters/npt").chmod(0o444)
        (base / "refcnt").write_text(refcnt)
    return build


def cases() -> list[Case]:
    def c(id: str, body: str, needles: tuple[str, ...], host: hostile_kit.Build | None = None) -> Case:
        return Case(id, XML, needles, both(host or _kvm(), _knob(body)))
    return [
        c("unknown-knob", "kvm.halt_poll_ns = 0", ("instance[1].host.kvm.halt_poll_ns", "unknown host knob")),
        c("unknown-module", 'vfio.enable_unsafe_noiommu_mode = "Y"', ("unknown host knob",)),
        c("control-key", '"kvm.nx\\u001b[2J" = "force"', ("instance[1].host.'kvm.nx\\x1b", "unknown host knob")),
        c("long-key", f'"kvm.{"x" * 5000}" = 1', ("instance[1].host.'kvm.xxx", "unknown host knob")),
        c("deep-key", "kvm.a.b.c = 1", ("instance[1].host.kvm.a", "is a table")),
        c("twice", 'kvm.nx_huge_pages = "off"\n"kvm.nx_huge_pages" = "force"', ("given twice",)),
        c("choice", 'kvm.nx_huge_pages = "on"', ("host.kvm.nx_huge_pages", "force, off or auto")),
        c("never", 'kvm.nx_huge_pages = "never"', ("host.kvm.nx_huge_pages", "'never' is refused")),
        c("smt-forceoff", 'smt = "forceoff"', ("host.smt", "on or off")),
        c("smt-bool", "smt = false", ("host.smt", "on or off")),
        c("ratio-negative", "kvm.nx_huge_pages_recovery_ratio = -1", ("recovery_ratio", "whole number")),
        c("ratio-huge", "kvm.nx_huge_pages_recovery_ratio = 99999999999999", ("recovery_ratio", "whole number")),
        c("ratio-float", "kvm.nx_huge_pages_recovery_ratio = 1.5", ("recovery_ratio", "whole number")),
        c("ratio-text", 'kvm.nx_huge_pages_recovery_ratio = "1; reboot"', ("recovery_ratio", "whole number")),
        c("reload-bool", "kvm.mitigate_smt_rsb = true", ("host.kvm.mitigate_smt_rsb", "must be Y or N")),
        c("reload-in-use", 'kvm_amd.npt = "N"', ("instance b: host.kvm_amd.npt", "kvm_amd is in use (refcnt 2)"),
          both(_kvm(), _amd("2\n"))),
        c("reload-kvm-in-use", 'kvm.mitigate_smt_rsb = "Y"', ("host.kvm.mitigate_smt_rsb", "kvm_amd is in use"),
          both(_kvm(mitigate_smt_rsb="N\n"), _amd("1\n"))),
        c("reload-refcnt-escape", 'kvm_amd.npt = "N"', ("kvm_amd is in use", "\\x1b"),
          both(_kvm(), _amd("\x1b[2J\n"))),
        c("reload-absent", 'kvm_amd.npt = "N"', ("instance b: host.kvm_amd.npt", "not present")),
        Case("not-a-table", XML, ("instance[1].host", "must be a table"),
             both(_kvm(), run_toml('[[instance]]\nname = "a"\n[[instance]]\nname = "b"\nhost = "off"\n'))),
        c("absent", 'kvm_intel.vmentry_l1d_flush = "always"',
          ("instance b: host.kvm_intel.vmentry_l1d_flush", "not present")),
        c("read-only", 'kvm.nx_huge_pages = "force"', ("instance b: host.kvm.nx_huge_pages", "read only"),
          _kvm(0o444)),
        c("smt-unsupported", 'smt = "off"', ("instance b: host.smt", "cannot be switched"),
          _kvm(smt="notsupported\n")),
        c("value-escape", 'kvm.nx_huge_pages = "force"', ("instance b: host.kvm.nx_huge_pages", "does not know"),
          _kvm(nx_huge_pages="\x1b]0;pwned\x07\n")),
        c("value-long", "kvm.nx_huge_pages_recovery_ratio = 5", ("recovery_ratio", "does not know"),
          _kvm(nx_huge_pages_recovery_ratio="9" * 100 + "\n")),
        Case("journal-path", ("host-restore", *S, "--dry-run"), ("journal.jsonl is damaged", "whose path"),
             both(snapshot_host, hostile_kit.with_file("snap/run/vmharness/journal.jsonl", _record("/etc/shadow")))),
        Case("journal-value", ("host-restore", *S, "--dry-run"), ("journal.jsonl is damaged", "whose before"),
             both(snapshot_host, hostile_kit.with_file("snap/run/vmharness/journal.jsonl",
                                                       _record(value="Y\n$(touch /tmp/vmh-hostile-pwned)")))),
        Case("journal-reload-module", ("host-restore", *S, "--dry-run"), ("journal.jsonl is damaged", "modules"),
             both(snapshot_host, hostile_kit.with_file("snap/run/vmharness/journal.jsonl",
                                                       _reload({"name": "evil", "load": {}, "runtime": {}})))),
        Case("journal-reload-param", ("host-restore", *S, "--dry-run"), ("journal.jsonl is damaged", "modules"),
             both(snapshot_host, hostile_kit.with_file("snap/run/vmharness/journal.jsonl", _reload(
                 {"name": "kvm_amd", "load": {"npt": "Y install=/tmp/vmh-hostile-pwned"}, "runtime": {}})))),
        c("smt-fifo", 'smt = "off"', ("smt/control",), both(snapshot_host, hostile_kit.fifo_at(SMT))),
        # host-prepare --dry-run --config: the same checks on the same files, and nothing but a dry run
        Case("prepare-unknown", (*PREP, "r.toml"), ("instance[1].host.kvm.halt_poll_ns", "unknown host knob"),
             both(_kvm(), _knob("kvm.halt_poll_ns = 0"))),
        Case("prepare-read-only", (*PREP, "r.toml"), ("instance b: host.kvm.nx_huge_pages", "read only"),
             both(_kvm(0o444), _knob('kvm.nx_huge_pages = "force"'))),
        Case("prepare-not-dry", ("host-prepare", "--bdf", "0000:b3:00.0", *S, "--config", "r.toml"),
             ("--config is read only with --dry-run",), both(_kvm(), _knob('kvm.nx_huge_pages = "force"'))),
        Case("prepare-fifo", (*PREP, "r.toml"), ("r.toml",), both(_kvm(), hostile_kit.fifo_at("r.toml"))),
        Case("prepare-missing", (*PREP, "nowhere.toml"), ("no configuration file nowhere.toml",), _kvm()),
        c("smt-outside", 'smt = "off"', ("smt/control", "outside"), both(snapshot_host, _outside)),
    ]


def _record(path: str = "/sys/module/kvm/parameters/nx_huge_pages", value: str = "N") -> str:
    return json.dumps({"seq": 1, "op": "hostknob", "path": path, "before": value, "owner": "run:x"}) + "\n"


def _reload(module: dict[str, object]) -> str:
    return json.dumps({"seq": 1, "op": "reload", "modules": [module], "owner": "run:x"}) + "\n"


def _outside(cwd: Path) -> None:
    """smt/control a link out of the snapshot."""
    (cwd / "elsewhere").write_text("on\n")
    (cwd / SMT).parent.mkdir(parents=True, exist_ok=True)
    (cwd / SMT).symlink_to("../../../../../../elsewhere")


CASES = cases()
outcomes = hostile_kit.fixture(CASES)


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 20


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_knob_that_makes_no_sense_is_refused_in_one_line(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
