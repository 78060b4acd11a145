"""Run a tiny guest that switches itself to 64-bit mode: the smallest proof that KVM really works.

Neither a real-mode guest nor one put straight into long mode by the host is enough: on hosts with
broken nested virtualization both run, while a guest that switches modes itself (as every kernel does
within its first second) hangs. So the probe starts in real mode and makes the whole switch itself.
Its vCPU gets the CPUID KVM supports (KVM_GET_SUPPORTED_CPUID, KVM_SET_CPUID2) first, as QEMU does: a
vCPU without CPUID entries has no long mode, and KVM refuses its EFER.LME write (a triple fault on a
KVM that works). Passing this is necessary, not sufficient: a PVM /dev/kvm runs this guest but not a
standard kernel (vmharness.host.inspect.kvm_boot boots one).

Executed as `python -m vmharness.host.inspect.kvm_probe` in a child process (a broken KVM can hang in
KVM_RUN, and only a separate process can be given up on). Prints one JSON object and exits 0 when the
guest ran to its port write; exits 1 with the reason otherwise.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import os
import struct
import sys
from collections.abc import Callable

KVMIO = 0xAE
SREGS_SIZE = 312  # 8 segments x 24, 2 descriptor tables x 16, 7 control registers, interrupt bitmap
REGS_SIZE = 144  # 18 general-purpose registers incl. rip and rflags
MEM_REGION_SIZE = 32
CPUID_ENTRY_SIZE = 40  # struct kvm_cpuid_entry2: function, index, flags, eax..edx, 3 words of padding
CPUID_MAX_ENTRIES = 256  # KVM returns E2BIG beyond its count; today's kernels report fewer than 100
KVM_EXIT_IO = 2
EXIT_NAMES = {8: "shutdown (the guest triple-faulted)", 9: "failed entry", 17: "internal error"}
PROBE_PORT = 0x3F8
PROBE_VALUE = 0x42
# Guest code, loaded at 0x7c00 and entered in real mode like a boot sector: builds an identity map
# of the first 2 MiB, loads a GDT, enters protected mode, enables PAE, EFER.LME and paging, far-jumps to
# 64-bit code, writes 0x42 to port 0x3f8 (COM1), then 0 to port 0xf4 (QEMU's isa-debug-exit) and halts.
# The same bytes boot under QEMU as a boot sector (tests/integration/test_kvm_probe.py checks that).
CODE = bytes.fromhex(
    "fa31c08ed88ec08ed0bf0010b90018fcf3abc70600100320c70600200330c706"
    "003083000f0116a87c0f20c06683c8010f22c0ea387c080066b810008ed88ec0"
    "8ed00f20e083c8200f22e0b8001000000f22d8b9800000c00f320d000100000f"
    "300f20c00d000000800f22c0ea737c00001800b04266baf803eeb000e6f4f4eb"
    "fd0f1f80000000000000000000000000ffff0000009acf00ffff00000092cf00"
    "ffff0000009aaf001f00887c0000"
)
LOAD_ADDR = 0x7C00
READY = "running"  # printed on a line of its own just before KVM_RUN
MEM_SIZE = 0x10000

def _ioc(direction: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (KVMIO << 8) | nr


KVM_GET_API_VERSION = _ioc(0, 0x00, 0)
KVM_CREATE_VM = _ioc(0, 0x01, 0)
KVM_GET_VCPU_MMAP_SIZE = _ioc(0, 0x04, 0)
KVM_GET_SUPPORTED_CPUID = _ioc(3, 0x05, 8)  # struct kvm_cpuid2 header: nent, padding
KVM_CREATE_VCPU = _ioc(0, 0x41, 0)
KVM_SET_USER_MEMORY_REGION = _ioc(1, 0x46, MEM_REGION_SIZE)
KVM_RUN = _ioc(0, 0x80, 0)
KVM_SET_REGS = _ioc(1, 0x82, REGS_SIZE)
KVM_GET_SREGS = _ioc(2, 0x83, SREGS_SIZE)
KVM_SET_SREGS = _ioc(1, 0x84, SREGS_SIZE)
KVM_SET_CPUID2 = _ioc(1, 0x90, 8)


def supported_cpuid(kvm: int) -> bytearray:
    """struct kvm_cpuid2 with every entry KVM supports. A mutable buffer: fcntl passes it to the
    kernel in place (an immutable one is copied, and only up to 1,024 bytes)."""
    buf = bytearray(struct.pack("=II", CPUID_MAX_ENTRIES, 0) + bytes(CPUID_ENTRY_SIZE * CPUID_MAX_ENTRIES))
    fcntl.ioctl(kvm, KVM_GET_SUPPORTED_CPUID, buf)
    nent = struct.unpack_from("=I", buf, 0)[0]
    return buf[: 8 + CPUID_ENTRY_SIZE * nent]


def probe(dev: str = "/dev/kvm", before_run: Callable[[], None] = lambda: None) -> dict[str, object]:
    """`before_run` is called just before the vCPU runs: the parent times the guest from there, not this
    interpreter's start (seconds where Python's files come over 9p in an emulated machine)."""
    kvm = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
    api = fcntl.ioctl(kvm, KVM_GET_API_VERSION)
    vm = fcntl.ioctl(kvm, KVM_CREATE_VM, 0)
    mem = mmap.mmap(-1, MEM_SIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    mem[LOAD_ADDR : LOAD_ADDR + len(CODE)] = CODE
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    region = struct.pack("=IIQQQ", 0, 0, 0, MEM_SIZE, addr)
    fcntl.ioctl(vm, KVM_SET_USER_MEMORY_REGION, region)
    vcpu = fcntl.ioctl(vm, KVM_CREATE_VCPU, 0)
    fcntl.ioctl(vcpu, KVM_SET_CPUID2, supported_cpuid(kvm))
    run_size = fcntl.ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE)
    run = mmap.mmap(vcpu, run_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    sregs = bytearray(SREGS_SIZE)
    fcntl.ioctl(vcpu, KVM_GET_SREGS, sregs)
    struct.pack_into("=Q", sregs, 0, 0)  # real mode as after reset, but cs:ip = 0000:7c00
    struct.pack_into("=H", sregs, 12, 0)
    fcntl.ioctl(vcpu, KVM_SET_SREGS, bytes(sregs))
    regs = bytearray(REGS_SIZE)
    struct.pack_into("=QQ", regs, 16 * 8, LOAD_ADDR, 0x2)  # rip, rflags (bit 1 is always set)
    fcntl.ioctl(vcpu, KVM_SET_REGS, bytes(regs))
    before_run()
    fcntl.ioctl(vcpu, KVM_RUN, 0)
    exit_reason = struct.unpack_from("=I", run, 8)[0]
    if exit_reason != KVM_EXIT_IO:
        what = EXIT_NAMES.get(exit_reason, f"exit reason {exit_reason}")
        raise RuntimeError(f"the probe guest stopped with {what} while switching to long mode")
    _direction, size, port, _count, offset = struct.unpack_from("=BBHIQ", run, 32)
    value = run[offset]
    if port != PROBE_PORT or size != 1 or value != PROBE_VALUE:
        raise RuntimeError(f"guest wrote {value:#x} to port {port:#x}, expected {PROBE_VALUE:#x}")
    return {"api_version": api, "exit": "io", "port": port, "value": value}


def main() -> int:
    dev = sys.argv[1] if len(sys.argv) > 1 else "/dev/kvm"
    try:
        print(json.dumps(probe(dev, lambda: print(READY, flush=True))))
    except (OSError, RuntimeError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
