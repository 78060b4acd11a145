"""What the rig takes as lost to TCG, not as the test's failure, told from what looks like it.

An L1 whose QEMU exited: with status 0 and nothing said on its console first, L1 reset itself (a
triple fault under TCG), which is taken as a wedge is, so that a test may go once more on a fresh L1;
a reboot, power-off, panic or the rig's init giving up each said so first, and stay the test's
failure, as does any other status. The stand-in for QEMU is a process that has exited with the
status given; the console is a file the test writes. An L2 that KVM stopped with an internal error:
only "cannot emulate during event delivery" on a nested page fault is TCG's, on the record of a real
one as the run wrote it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.rig import failures, topology
from tests.rig import rig as rig_module

BOOTED = "[    4.56] 9p: Installing v9fs 9p2000 file system support\n"


@pytest.mark.parametrize(("status", "last", "reset_itself"), [
    (0, "[  103.20] kvm [828]: vcpu0, guest rIP: 0xffffffff8107e744 Unhandled WRMSR(0xc0010007) = 0xffff\n", True),
    (0, "", True),
    (0, "[  200.10] reboot: Restarting system\n", False),
    (0, "[  200.10] reboot: Power down\n", False),
    (0, "[  200.10] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n"
        + "[  200.11]  dump_stack_lvl+0x44/0x5c\n" * 20, False),  # a panic's stack after its line
    (0, "rig-init: FATAL: failed: mount -t 9p hostroot /host\n[    5.1] reboot: Power down\n", False),
    (1, "", False),
    (-9, "", False),
])
def test_an_l1_that_reset_itself_is_told_from_one_that_said_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 status: int, last: str, reset_itself: bool) -> None:
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path / "kept")
    (tmp_path / "kept").mkdir()
    (tmp_path / "l1").mkdir()
    (tmp_path / "l1" / "console.log").write_text(BOOTED * 50 + last)
    qemu = subprocess.Popen([sys.executable, "-c", f"import os; os._exit({status})"] if status >= 0
                            else [sys.executable, "-c", f"import os, signal; os.kill(os.getpid(), {-status})"])
    qemu.wait(timeout=30)
    rig = rig_module.Rig(None, topology.Files(tmp_path / "l1"), qemu)  # type: ignore[arg-type]
    with pytest.raises(failures.RigError, match=rf"QEMU exited with status {status}") as exc:
        rig.await_boot("a boot", timeout=60)
    assert isinstance(exc.value, failures.ResetItself) is reset_itself, exc.value.message
    assert isinstance(exc.value, failures.Wedged) is reset_itself
    if reset_itself:
        assert "L1 reset itself, its console saying nothing of why" in exc.value.message
        with pytest.raises(failures.Wedged, match="L1 wedged earlier and was stopped: QEMU exited with status 0"):
            rig.run(["true"], timeout=60)  # said once; what follows fails at once
    rig._stopped = True


# A failed point's error as `vmharness run` wrote it in the kexec test's 7.3 boot (clean clone of 22afd6b,
# 2026-12-05), its register dump shortened.
LOST = ("the guest did not boot: the guest halted after its agent answered (libvirt: paused for a reason it "
        "does not know (QEMU stops a guest so on a KVM internal error or emulation failure: see its log)); its "
        "console ends with:\n    vmh-init: ready: the guest agent is up\nits QEMU's log ends with:\n"
        "    KVM internal error. Suberror: 3\n    extra data[0]: 0x00000000fea03000\n"
        "    extra data[1]: 0x0000000000000400\n    extra data[2]: 0x0000000100000006\n"
        "    extra data[3]: 0x00000000fea03000\n    extra data[4]: 0x0000000000000000\n"
        "    RAX=ffffffffc022f070 RBX=ffff8880066fb300 RCX=0000000000000100 RDX=ffff8880066c1240\n")


@pytest.mark.parametrize(("error", "lost"), [
    (LOST, True),
    (LOST.replace("Suberror: 3", "Suberror: 1"), False),  # an emulation failure: the guest's or KVM's
    (LOST.replace("data[1]: 0x0000000000000400", "data[1]: 0x000000000000004e"), False),  # not an NPF
    (LOST.split("its QEMU's log")[0], False),  # halted, its QEMU saying nothing of KVM
    ("the guest did not boot within 900 s", False),
])
def test_only_an_l2_stopped_for_an_event_in_delivery_at_a_nested_page_fault_is_lost_to_tcg(error: str,
                                                                                            lost: bool) -> None:
    assert failures.lost_under_tcg(error) is lost
    assert issubclass(failures.L2Lost, failures.Wedged)  # so that the test goes once more, as after a wedge
