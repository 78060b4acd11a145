"""The kernel's part of a snapshot: procfs files, the modules and their parameters, the device nodes,
memory (hugepage pools per size and per node, the NUMA nodes' CPUs) and what a tuning plan reads besides
the NICs (clocksource, governors, THP, KSM and sysctls; of /proc/sys only what any user may read: the
kernel makes secrets such as tcp_fastopen_key root-only)."""

from __future__ import annotations

import re

from vmharness.host.inspect import cpubits, hugepages, modules
from vmharness.host.snapshot.writer import Writer
from vmharness.system import sysfs

PROC_FILES = (
    "/proc/cmdline", "/proc/cpuinfo", "/proc/meminfo", "/proc/interrupts", "/proc/mounts",
    "/proc/modules", "/proc/sys/kernel/osrelease", "/proc/net/route", "/proc/net/ipv6_route",
    "/proc/net/fib_trie", "/proc/net/if_inet6", "/proc/net/dev", "/proc/net/vlan/config",
)
CPU = sysfs.CPU
CPUFREQ_ATTRS = ("scaling_governor", "scaling_available_governors", "scaling_driver")
CLOCKSOURCE = sysfs.CLOCKSOURCE
# Directories whose files tuning reads as they are: THP, KSM, and the sysctl families a profile sets.
TUNING_DIRS = ("/sys/kernel/mm/transparent_hugepage", "/sys/kernel/mm/ksm")
SYSCTL_DIRS = ("/proc/sys/net/core", "/proc/sys/net/ipv4", "/proc/sys/fs", "/proc/sys/vm")
HUGEPAGE_ATTRS = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
                  "nr_overcommit_hugepages")
MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1", "vfio_pci_core", "kvm", "kvm_intel", "kvm_amd")
DEVICE_NODES = ("/dev/kvm", "/dev/vfio")


def memory(w: Writer) -> None:
    root = w.root
    for kib in hugepages.sizes(root):
        for attr in HUGEPAGE_ATTRS:
            w.file(f"{hugepages.GLOBAL}/hugepages-{kib}kB/{attr}")
    for name in ("online", "possible", "has_cpu", "has_memory"):
        w.file(f"{hugepages.NODES}/{name}")
    for name in ("online", "possible", "vulnerabilities/itlb_multihit"):
        w.file(f"{CPU}/{name}")
    w.file(f"{CPU}/smt/control", keep_mode=True)  # the smt host knob, and what SMT off would take away:
    for cpu in w.root.listdir(CPU):
        if re.fullmatch(r"cpu[0-9]{1,5}", cpu):
            w.file(f"{CPU}/{cpu}/topology/thread_siblings_list")
    for node in hugepages.nodes(root):
        base = f"{hugepages.NODES}/node{node}"
        w.file(f"{base}/cpulist")
        w.file(f"{base}/meminfo")
        for d in root.listdir(f"{base}/hugepages"):
            for attr in HUGEPAGE_ATTRS:
                w.file(f"{base}/hugepages/{d}/{attr}")


def kernel(w: Writer) -> None:
    root = w.root
    w.files_in(cpubits.VULNERABILITIES)  # the host's verdicts, which a `*-no` CPU bit is checked against
    for path in PROC_FILES:
        w.file(path)
    for mod in MODULES:
        if root.exists(f"/sys/module/{mod}"):
            w.dir(f"/sys/module/{mod}")
            w.file(f"/sys/module/{mod}/initstate")
            for p in root.listdir(f"/sys/module/{mod}/parameters"):
                w.file(f"/sys/module/{mod}/parameters/{p}", keep_mode=True)  # host knobs: writable or not
    rel = modules.kernel_release(root)
    if rel and re.fullmatch(r"[\w.+~-]+", rel):
        for name in ("modules.dep", "modules.builtin"):
            w.file(f"/lib/modules/{rel}/{name}")
    for node in DEVICE_NODES:
        if root.is_dir(node):
            for entry in root.listdir(node):
                w.data(f"{node}/{entry}", b"")
            w.dir(node)
        elif root.exists(node):
            w.data(node, b"")


def tuning(w: Writer) -> None:
    """What a tuning plan reads besides the NICs: clocksource, governors, THP, KSM and sysctls."""
    for name in ("available_clocksource", "current_clocksource"):
        w.file(f"{CLOCKSOURCE}/{name}")
    for cpu in w.root.listdir(CPU):
        if re.fullmatch(r"cpu[0-9]{1,5}", cpu):
            for attr in CPUFREQ_ATTRS:
                real = w.follow(f"{CPU}/{cpu}/cpufreq/{attr}")  # cpufreq links to ../cpufreq/policyN
                if real is not None:
                    w.file(real)
    for path in TUNING_DIRS:
        w.files_in(path)
    for path in SYSCTL_DIRS:
        w.files_in(path, readable=0o004)
