"""host-check's rows for running a KVM guest at all: the CPU's virtualization, /dev/kvm, whether KVM
really runs a guest (the live probe), the libvirt daemon and QEMU."""

from __future__ import annotations

from vmharness.host.inspect import probes
from vmharness.host.inspect.hostcheck.facts import FAIL, PASS, Check, Facts, live, live_flag


def cpu_virt(f: Facts) -> Check:
    if "vmx" in f.cpu_flags:
        return Check("CPU virtualization", PASS, "vmx (Intel VT-x)")
    if "svm" in f.cpu_flags:
        return Check("CPU virtualization", PASS, "svm (AMD-V)")
    return Check(
        "CPU virtualization", FAIL, "neither vmx nor svm in /proc/cpuinfo flags",
        "enable VT-x/AMD-V in the firmware setup (in a VM: nested virtualization on the outer host)",
    )


def kvm_device(f: Facts) -> Check:
    if f.root.exists("/dev/kvm"):
        return Check("/dev/kvm", PASS, "present")
    return Check("/dev/kvm", FAIL, "missing", "modprobe kvm_intel (or kvm_amd); enable virtualization in firmware")


def kvm_usable(f: Facts) -> Check:
    return live_flag(f, "kvm", "KVM usable", "usable",
                      "guests must run under TCG (slow); fix nested virtualization or use bare metal")


def libvirt(f: Facts) -> Check:
    return live_flag(f, "libvirtd", "libvirtd", "reachable", "start it: libvirtd -d (or systemctl start libvirtd)")


def qemu(f: Facts) -> Check:
    name = "QEMU"
    data = live(f, "qemu", name)
    if isinstance(data, Check):
        return data
    if data.get("version"):
        return Check(name, PASS, f"{data['version']} ({data['path']})")
    if data.get("path"):
        return Check(name, FAIL, f"{data['path']} does not report a version", "reinstall qemu-system-x86")
    return Check(name, FAIL, f"{probes.QEMU} not found", "apt-get install qemu-system-x86")
