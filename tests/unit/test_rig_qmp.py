"""Where L1's vCPUs are when it hangs (tests/rig/qmp.py `where_cpus`, in the rig's failures beside the
console): read from a real QEMU's register dump, here a machine held before its first instruction, and
from a dump of a guest whose vCPUs all halted, as one waiting for an interrupt that does not come; and
the Magic SysRq key sent through QEMU's keyboard, which takes one key and nothing else."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.rig import qmp

HALTED = ("\r\nCPU#0\r\nRAX=0000000000000000 RBX=ffffffff82a0c940\r\nRIP=ffffffff81f8e6ab RFL=00000246 [---Z-P-] "
          "CPL=0 II=0 A20=1 SMM=0 HLT=1\r\nES =0000\r\nCPU#1\r\nRIP=ffffffff81f8e6ab RFL=00000246 [---Z-P-] CPL=0 "
          "II=0 A20=1 SMM=0 HLT=1\r\n")


def test_a_dump_of_halted_vcpus_says_each_is_halted_and_where() -> None:
    assert qmp.described_cpus(HALTED) == "cpu0 RIP=ffffffff81f8e6ab halted; cpu1 RIP=ffffffff81f8e6ab halted"
    assert qmp.described_cpus("no registers here") == "no vCPU in QEMU's register dump"


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86_64 is not installed")
def test_a_real_qemu_held_at_its_reset_vector_is_read(tmp_path: Path) -> None:
    sock = tmp_path / "qmp.sock"
    qemu = subprocess.Popen(["qemu-system-x86_64", "-M", "q35", "-smp", "2", "-S", "-nodefaults", "-display", "none",
                             "-qmp", f"unix:{sock},server=on,wait=off"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        said = qmp.where_cpus(sock, timeout=30)
        qmp.sysrq(sock, "w", timeout=30)  # QEMU takes the keys (a guest's kernel would print its blocked tasks)
        with pytest.raises(ValueError, match="not a sysrq key"):
            qmp.sysrq(sock, "w; quit", timeout=30)
        assert qemu.poll() is None
    finally:
        qemu.kill()
        qemu.wait()
    assert said.startswith("cpu0 RIP=0000fff0; cpu1 RIP="), said  # real mode: the dump names it EIP
    assert "halted" not in said.split(";")[0], said
