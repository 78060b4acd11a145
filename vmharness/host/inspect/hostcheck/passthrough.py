"""host-check's rows for handing a device to a guest: the IOMMU in the firmware, in the kernel and on
its cmdline, interrupt remapping (VFIO refuses to assign devices without it) and the VFIO modules."""

from __future__ import annotations

import re
from collections.abc import Callable

from vmharness.host.inspect import modules
from vmharness.host.inspect.hostcheck.facts import ACPI_TABLES, FAIL, FIRMWARE_IOMMU, PASS, WARN, Check, Facts
from vmharness.system.root import LARGE_READ


def iommu_firmware(f: Facts) -> Check:
    name = "IOMMU in firmware"
    found = [f"{t} ({what})" for t, what in FIRMWARE_IOMMU.items() if f.root.exists(f"{ACPI_TABLES}/{t}")]
    if found:
        return Check(name, PASS, "ACPI table " + ", ".join(found))
    if not f.root.exists(ACPI_TABLES):
        return Check(name, WARN, f"{ACPI_TABLES} is missing: cannot tell",
                     "on a non-ACPI machine check the firmware documentation")
    fix = "enable VT-d" if f.vendor == "intel" else "enable AMD-Vi / IOMMU"
    return Check(name, FAIL, "no DMAR or IVRS ACPI table: the firmware does not offer an IOMMU",
                 f"{fix} in the firmware setup (in a VM: -device intel-iommu)")


def iommu_kernel(f: Facts) -> Check:
    name = "IOMMU in kernel"
    if f.iommus and f.groups:
        return Check(name, PASS, f"enabled: {', '.join(f.iommus)}; {f.groups} IOMMU groups")
    if f.iommus:
        return Check(name, FAIL, f"{', '.join(f.iommus)} registered but no IOMMU groups",
                     "check dmesg for DMAR/AMD-Vi errors")
    if iommu_firmware(f).status == PASS and f.vendor == "intel":
        return Check(name, FAIL, "the firmware has an IOMMU but the kernel did not enable it",
                     "add intel_iommu=on to the kernel cmdline and reboot (vmharness host-setup --print)")
    return Check(name, FAIL, "no IOMMU registered (/sys/class/iommu is empty), no IOMMU groups",
                 "enable the IOMMU in firmware first, then on the kernel cmdline")


def iommu_cmdline(f: Facts) -> Check:
    name = "IOMMU on cmdline"
    intel, amd, generic = f.param("intel_iommu"), f.param("amd_iommu"), f.param("iommu")
    shown = " ".join(a for a in f.cmdline if a.split("=")[0] in ("intel_iommu", "amd_iommu", "iommu"))
    off = [k for k, v in (("intel_iommu", intel), ("amd_iommu", amd), ("iommu", generic)) if v == "off"]
    if off:
        return Check(name, FAIL, f"{' '.join(o + '=off' for o in off)} turns it off",
                     "remove it from the kernel cmdline and reboot")
    pt = " (iommu=pt: host devices bypass translation)" if generic == "pt" else ""
    if f.vendor == "intel":
        if intel is not None and "on" in intel.split(","):
            return Check(name, PASS, f"{shown}{pt}")
        if f.iommus:
            return Check(name, PASS, f"intel_iommu=on absent, but the kernel enabled it by default{pt}")
        return Check(name, FAIL, f"intel_iommu=on is missing{': ' + shown if shown else ''}",
                     "add intel_iommu=on iommu=pt to the kernel cmdline and reboot")
    if f.iommus:  # AMD-Vi is on by default when the firmware has IVRS
        return Check(name, PASS, f"{shown or 'AMD-Vi on by default'}{pt}")
    return Check(name, FAIL, f"AMD-Vi is not enabled{': ' + shown if shown else ''}",
                 "enable the IOMMU in firmware; add iommu=pt to the kernel cmdline")


def interrupt_remapping(f: Facts) -> Check:
    name = "interrupt remapping"
    interrupts = f.root.read_optional("/proc/interrupts", limit=LARGE_READ) or ""
    if re.search(r"\bIR-", interrupts):
        return Check(name, PASS, "on (IR- interrupt chips in /proc/interrupts)")
    unsafe = f.root.read_optional("/sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts")
    if not f.iommus:
        return Check(name, FAIL, "off: it needs the IOMMU, which is off", "enable the IOMMU first")
    if unsafe in ("Y", "1"):
        return Check(name, WARN, "off; vfio_iommu_type1.allow_unsafe_interrupts=Y lets VFIO run without it",
                     "enable x2APIC/interrupt remapping in firmware to drop the unsafe override")
    return Check(name, FAIL, "off: VFIO refuses to assign devices without it",
                 "enable x2APIC/interrupt remapping in firmware, or (unsafe) "
                 "vfio_iommu_type1.allow_unsafe_interrupts=1")


def module_check(name: str) -> Callable[[Facts], Check]:
    def check(f: Facts) -> Check:
        st = modules.state(f.root, name)
        if st.available:
            return Check(f"module {name}", PASS, st.detail)
        return Check(f"module {name}", FAIL, st.detail,
                     "install the kernel's modules package, or use a kernel with CONFIG_VFIO_PCI")
    return check
