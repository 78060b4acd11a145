"""An L1 whose QEMU exited: with status 0 and nothing said on its console first, L1 reset itself (a
triple fault under TCG), which is taken as a wedge is, so that a test may go once more on a fresh L1;
a reboot, power-off, panic or the rig's init giving up each said so first, and stay the test's
failure, as does any other status. The stand-in for QEMU is a process that has exited with the
status given; the console is a file the test writes."""

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
