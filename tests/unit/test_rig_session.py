"""An L1 whose KVM unload hangs is Wedged and stopped, said as a warning where the block before it passed;
the session's next rig module then gets a fresh L1 (tests/rig/session.py), while a usable one is kept."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig import failures, topology
from tests.rig import rig as rig_module
from tests.rig.qga import AgentError
from tests.rig.session import SessionRig
from tests.unit.test_rig_agent import _Answering, _qemu_that_quits
from vmharness.errors import HarnessError
from vmharness.system.proc import Result


class _Rmmod(_Answering):
    """An agent whose modprobe answers and whose rmmod hangs past its timeout, or exits 1 (a module in use)."""

    def __init__(self, rmmod: str) -> None:
        self.rmmod = rmmod
        self.ran: list[str] = []

    def exec(self, argv: list[str], **_: object) -> Result:
        self.ran.append(argv[-1])
        if "rmmod" not in argv[-1] or self.rmmod == "ends":
            return Result(tuple(argv), 0, "", "")
        if self.rmmod == "hangs":
            raise AgentError(f"{argv[-1]} did not finish within 120 s in L1")
        return Result(tuple(argv), 1, "", "rmmod: ERROR: Module kvm_amd is in use")


@pytest.fixture()
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[rig_module.Rig]:
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path / "kept")
    (tmp_path / "kept").mkdir()
    (tmp_path / "l1").mkdir()
    (tmp_path / "l1" / "console.log").write_text("[  593.8] INFO: task rmmod:4711 blocked for more than 120 seconds.\n")
    qemu = _qemu_that_quits(monkeypatch)
    made = rig_module.Rig(None, topology.Files(tmp_path / "l1"), qemu)  # type: ignore[arg-type]
    monkeypatch.setattr(made, "_where_l1_waits", lambda: [])
    try:
        yield made
    finally:
        qemu.kill()
        qemu.wait()
        made._stopped = True


def test_an_unload_that_hangs_wedges_l1_and_one_refused_fails_with_l1_kept(rig: rig_module.Rig) -> None:
    rig.agent = _Rmmod("refused")  # type: ignore[assignment]
    with pytest.raises(HarnessError, match="in use") as refused:
        rig.unload_kvm()
    assert not isinstance(refused.value, failures.Wedged) and rig.usable  # a guest holding KVM is the test's

    rig.agent = _Rmmod("hangs")  # type: ignore[assignment]
    with pytest.raises(failures.Wedged, match=r"(?s)kvm_amd and kvm were not unloaded.*within 120 s.*rmmod:4711"):
        rig.unload_kvm()
    assert not rig.usable and rig.qemu.wait(timeout=30) is not None
    with pytest.raises(failures.Wedged, match="L1 wedged earlier"):
        rig.run(["true"], timeout=60)


@pytest.mark.parametrize("block", ["passed", "failed"])
def test_kvm_after_a_block_that_passed_says_the_wedge_and_after_one_that_failed_raises_the_block_s(
        rig: rig_module.Rig, block: str) -> None:
    rig.agent = agent = _Rmmod("hangs")  # type: ignore[assignment]
    if block == "passed":
        said = "L1 wedged after the test passed, and was stopped: kvm_amd and kvm"
        with pytest.warns(UserWarning, match=said), rig.kvm():
            pass
    else:
        with pytest.raises(AssertionError, match="the block's"), rig.kvm():
            raise AssertionError("the block's")
    assert not rig.usable
    assert agent.ran == ["modprobe kvm_amd && test -c /dev/kvm", "rmmod kvm_amd; rmmod kvm; ! test -e /dev/kvm"]


def test_the_session_keeps_a_usable_l1_and_boots_a_fresh_one_for_a_wedged_one(
        rig: rig_module.Rig, tmp_path: Path) -> None:
    later = subprocess.Popen(["sleep", "60"])
    booted = [rig, rig_module.Rig(None, topology.Files(tmp_path / "l1"), later)]  # type: ignore[arg-type]
    held = SessionRig(lambda: booted.pop(0))
    try:
        first = held.usable()
        assert held.usable() is first and held.boots == 1
        rig.agent = _Rmmod("hangs")  # type: ignore[assignment]
        with pytest.raises(failures.Wedged):
            first.unload_kvm()
        with pytest.warns(UserWarning, match="wedged in an earlier module or test; a fresh one is booted"):
            second = held.usable()
        assert second is not first and second.usable and held.boots == 2
    finally:
        later.kill()
        later.wait()
        if held.rig is not None:
            held.rig._stopped = True
