"""Host knobs read only when KVM's modules load (host/prepare/reload.py) on a synthetic tree whose
modprobe and rmmod act on it as the kernel would: a reload journaled before anything is unloaded, the
knob read back, every other parameter as it was (load-time ones passed again, run-time ones written
back), refused while a guest holds the module, and given back after a failure, a SIGKILL mid-reload and
by host-restore. The real modules are reloaded in the rig's L1 (tests/integration/test_kvm_rig.py)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.experiment import ops
from vmharness.host.prepare import knobs
from vmharness.journal import journal, restore
from vmharness.system import proc
from vmharness.system.root import HostRoot

OWNER = "run:20260101-000000-abcd"
# module -> parameter -> (default, writable)
DEFAULTS = {"kvm": {"mitigate_smt_rsb": ("N", False), "halt_poll_ns": ("200000", True)},
            "kvm_amd": {"npt": ("Y", False), "nested": ("1", False)}}
assert ops.REGISTRARS  # every op known to host-restore


class Modules:
    """modprobe and rmmod on a tree: a load writes the module's parameters (defaults, then the
    arguments), an unload removes its folder; `fail` names a module whose load fails."""

    def __init__(self, base: Path) -> None:
        self.base, self.calls, self.fail = base, [], ""  # type: ignore[var-annotated]
        for m in DEFAULTS:
            self.load(m, {})

    def load(self, module: str, args: dict[str, str]) -> None:
        folder = self.base / "sys/module" / module / "parameters"
        folder.mkdir(parents=True, exist_ok=True)
        for name, (default, writable) in DEFAULTS[module].items():
            f = folder / name
            if f.exists():
                f.chmod(0o644)
            f.write_text(args.get(name, default) + "\n")
            f.chmod(0o644 if writable else 0o444)
        if module == "kvm_amd":
            (self.base / "sys/module/kvm_amd/refcnt").write_text("0\n")

    def run(self, argv: list[str], **_: Any) -> proc.Result:
        self.calls.append(" ".join(argv))
        cmd, _dash, module, *args = argv
        if cmd == "rmmod":
            for f in sorted((self.base / "sys/module" / module).rglob("*"), reverse=True):
                f.unlink() if f.is_file() else f.rmdir()
            (self.base / "sys/module" / module).rmdir()
        elif module == self.fail:
            return proc.Result(tuple(argv), 1, "", f"modprobe: ERROR: could not insert '{module}'")
        else:
            self.load(module, dict(a.split("=", 1) for a in args))
        return proc.Result(tuple(argv), 0, "", "")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeHost, Modules, HostRoot]:
    h = FakeHost(tmp_path / "root", nodes=1, cpus_per_node=2)
    mods = Modules(h.base)
    monkeypatch.setattr(proc, "run", mods.run)  # reload.py calls proc.run: modprobe and rmmod
    return h, mods, HostRoot(h.base, allow_writes=True)


def _tree(base: Path) -> dict[str, tuple[str, int]]:
    """Every file's text (as sysfs reads it: a trailing newline is not the value's) and mode."""
    return {str(p.relative_to(base)): (p.read_text().strip(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(base.rglob("*")) if p.is_file() and "run/vmharness" not in str(p)}


def _read(h: FakeHost, module: str, name: str) -> str:
    return h.p(f"sys/module/{module}/parameters/{name}").read_text().strip()


def test_a_vendor_parameter_is_set_by_a_reload_journaled_first_and_given_back(host: Any) -> None:
    h, mods, root = host
    mods.load("kvm_amd", {"nested": "0"})  # loaded by hand with an option: it must come back with it
    before = _tree(h.base)
    applied = knobs.apply(root, "b", {"kvm_amd.npt": "N"}, OWNER, print)
    assert _read(h, "kvm_amd", "npt") == "N" and _read(h, "kvm_amd", "nested") == "0"
    assert mods.calls == ["rmmod -- kvm_amd", "modprobe -- kvm_amd nested=0 npt=N"]
    [rec] = journal.read(root)
    assert rec["op"] == "reload" and rec["modules"] == [{"name": "kvm_amd", "load": {"nested": "0", "npt": "Y"},
                                                          "runtime": {}}]
    assert applied.report["kvm_amd.npt"] == {"before": "Y", "set": "N", "reads": "N", "reloaded": True}
    assert knobs.give_back(root, applied, print) == []
    assert _tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_a_kvm_parameter_reloads_its_vendor_module_too_and_writes_back_the_run_time_ones(host: Any) -> None:
    h, mods, root = host
    h.p("sys/module/kvm/parameters/halt_poll_ns").write_text("5\n")  # set at run time by someone
    before = _tree(h.base)
    applied = knobs.apply(root, "b", {"kvm.mitigate_smt_rsb": "Y"}, OWNER, print)
    assert mods.calls[:2] == ["rmmod -- kvm_amd", "rmmod -- kvm"]
    assert mods.calls[2].startswith("modprobe -- kvm ") and "mitigate_smt_rsb=Y" in mods.calls[2]
    assert _read(h, "kvm", "halt_poll_ns") == "200000"  # a reload's default, until it is given back
    assert knobs.give_back(root, applied, print) == []
    assert _tree(h.base) == before


def test_a_module_a_guest_holds_is_refused_and_nothing_is_touched(host: Any) -> None:
    h, mods, root = host
    h.p("sys/module/kvm_amd/refcnt").write_text("3\n")
    before = _tree(h.base)
    with pytest.raises(HarnessError) as err:
        knobs.apply(root, "b", {"kvm_amd.npt": "N"}, OWNER, print)
    assert "instance b: host.kvm_amd.npt: its module must be reloaded, and kvm_amd is in use (refcnt 3)" in \
        err.value.message
    assert mods.calls == [] and _tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_a_load_that_fails_is_given_back_loaded_as_it_was(host: Any) -> None:
    h, mods, root = host
    before = _tree(h.base)
    mods.fail = "kvm_amd"
    with pytest.raises(HarnessError, match="modprobe kvm_amd nested=1 npt=N failed"):
        knobs.apply(root, "b", {"kvm_amd.npt": "N"}, OWNER, print)
    assert not h.p("sys/module/kvm_amd").exists()  # the give-back's own load fails as well: said, kept
    mods.fail = ""
    assert restore.undo(root, print) == []  # host-restore, once modprobe works
    assert _tree(h.base) == before and not h.p(journal.JOURNAL).exists()


@pytest.mark.parametrize("unloaded", [(), ("kvm_amd",), ("kvm_amd", "kvm")])
def test_a_sigkill_mid_reload_then_host_restore_loads_them_as_they_were(host: Any, unloaded: tuple[str, ...]) -> None:
    """The journal holds the reload; the process died after unloading none, one or both modules."""
    h, mods, root = host
    before = _tree(h.base)
    journal.record(root, {"op": "reload", "modules": [
        {"name": m, "load": {k: d for k, (d, w) in DEFAULTS[m].items() if not w},
         "runtime": {k: d for k, (d, w) in DEFAULTS[m].items() if w}} for m in ("kvm", "kvm_amd")]}, OWNER)
    for m in unloaded:
        mods.run(["rmmod", "--", m])
    assert restore.undo(root, print) == []
    assert _tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_a_guest_started_since_keeps_the_module_and_the_problem_is_said(host: Any) -> None:
    h, _mods, root = host
    applied = knobs.apply(root, "b", {"kvm_amd.npt": "N"}, OWNER, print)
    h.p("sys/module/kvm_amd/refcnt").write_text("1\n")
    [problem] = knobs.give_back(root, applied, print)
    assert "kvm_amd not reloaded as they were: kvm_amd is in use (refcnt 1)" in problem
    assert _read(h, "kvm_amd", "npt") == "N" and journal.read(root)  # kept on record for host-restore


def test_the_preview_says_which_modules_a_knob_reloads(host: Any) -> None:
    _h, mods, root = host
    line = knobs.preview(root, "b", {"kvm.mitigate_smt_rsb": "Y"})
    assert "kvm.mitigate_smt_rsb = Y (reads N now, set by reloading kvm, kvm_amd while no guest runs)" in line
    assert mods.calls == []  # a preview reloads nothing


def test_kvm_used_by_a_module_other_than_its_vendor_one_is_not_reloaded(host: Any) -> None:
    h, mods, root = host
    h.write("proc/modules", "kvm_amd 1 0 - Live 0x0\nkvm 2 1 kvm_amd,kvmgt, Live 0x0\n")
    with pytest.raises(HarnessError, match="kvm is used by kvmgt, which a reload would unload too"):
        knobs.apply(root, "b", {"kvm.mitigate_smt_rsb": "Y"}, OWNER, print)
    assert mods.calls == []
