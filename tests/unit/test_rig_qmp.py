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


# `info lapic` of two of L1's vCPUs in one of its hangs (2026-12-01): cpu1 took its timer's interrupt and the
# end of interrupt never came, so vector 236 stays in service and its timer periodic, as it was set at boot
STUCK = ("dumping local APIC state for CPU 1 \r\n\r\nLVT0\t 0x00010700 active-hi edge  masked                      "
         "ExtINT (vec 0)\r\nLVTT\t 0x000200ec active-hi edge                 periodic     Fixed  (vec 236)\r\n"
         "Timer\t DCR=0x3 (divide by 16) initial_count = 250018 current_count = 104697\r\nISR\t 236 \r\n"
         "IRR\t 33 34 236 \r\n\r\nAPR 0x01 TPR 0x10 DFR 0x0f LDR 0x02 PPR 0xe0\r\n")
WELL = ("dumping local APIC state for CPU 0 \r\n\r\nLVTT\t 0x000000ec active-hi edge                 one-shot     "
        "Fixed  (vec 236)\r\nISR\t (none)\r\nIRR\t (none)\r\n\r\nAPR 0x00 TPR 0x10 DFR 0x0f LDR 0x01 PPR 0x10\r\n")


def test_a_dump_of_halted_vcpus_says_each_is_halted_and_where() -> None:
    assert qmp.described_cpus(HALTED) == "cpu0 RIP=ffffffff81f8e6ab halted; cpu1 RIP=ffffffff81f8e6ab halted"
    assert qmp.described_cpus("no registers here") == "no vCPU in QEMU's register dump"


def test_a_vector_left_in_service_is_said_with_the_timers_mode() -> None:
    said = qmp.described_cpus(HALTED, {"0": WELL, "1": STUCK})
    assert said == ("cpu0 RIP=ffffffff81f8e6ab halted (APIC in service: none, timer one-shot); "
                    "cpu1 RIP=ffffffff81f8e6ab halted (APIC in service: 236, timer periodic)")
    # an answer that is no APIC's dump (an older QEMU, an error's text) adds nothing rather than a guess
    assert qmp.described_cpus(HALTED, {"0": "unknown command", "1": ""}) == qmp.described_cpus(HALTED)


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
    # real mode: the dump names it EIP; the APICs as reset left them
    assert said.startswith("cpu0 RIP=0000fff0 (APIC in service: none, timer one-shot); cpu1 RIP="), said
    assert "halted" not in said.split(";")[0], said
