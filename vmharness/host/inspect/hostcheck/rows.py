"""host-check's rows in the order it prints them, run on one reading of the facts."""

from __future__ import annotations

from collections.abc import Callable

from vmharness.host.inspect.hostcheck.facts import Check, Facts, gather
from vmharness.host.inspect.hostcheck.memory import hugeadm_pools, hugepage_sizes, hugetlbfs
from vmharness.host.inspect.hostcheck.passthrough import (
    interrupt_remapping,
    iommu_cmdline,
    iommu_firmware,
    iommu_kernel,
    module_check,
)
from vmharness.host.inspect.hostcheck.virt import cpu_virt, kvm_device, kvm_usable, libvirt, qemu
from vmharness.system.root import HostRoot

CHECKS: tuple[Callable[[Facts], Check], ...] = (
    cpu_virt, kvm_device, kvm_usable, iommu_firmware, iommu_kernel, iommu_cmdline,
    interrupt_remapping, module_check("vfio-pci"), module_check("vfio_iommu_type1"),
    hugepage_sizes, hugetlbfs, hugeadm_pools, libvirt, qemu,
)


def run_checks(root: HostRoot) -> list[Check]:
    facts = gather(root)
    return [check(facts) for check in CHECKS]
