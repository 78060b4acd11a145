"""The L1 machine: what QEMU is asked to build, and the facts L1's init needs about it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.qemu_kit import qemu_10

HOSTNAME = "rig-l1"
AGENT_PORT = "org.qemu.guest_agent.0"
NIC0_ADDR = "198.18.0.1/24"
GATEWAY = "198.18.0.254"  # nothing answers; it only has to be the default route
NINEP_MSIZE = 512 * 1024


CACHED_TAG = "hostcached"
"""L0's root again, read-only, through a second 9p device that L1 mounts with cache=loose (9p's
virtio transport takes one mount per device). The main mount keeps no cache, so L1 sees at once
what L0 writes while the rig runs (the rig's cache, /etc and /var under L1's overlays); this one
serves only trees that stay as they are for the rig's life (rig.cached_trees: /usr, the
interpreter's prefix, the venv and the package, whose bytecode Rig.start compiles first). Every
command run in L1 starts an interpreter and loads its libraries from them: `vmharness --help` took
20 s there without the cache, 10 s with it."""

PERSIST_TAG = "rigpersist"
"""A rig whose L1 reboots (its host boots, kexec) gets a third 9p device: a folder of the rig's on L0,
writable, that L1 mounts again after each boot (l1-init.sh: the harness's host boots' state, the run
folder, and the kernel and initrd L1 comes home to, in its /boot). Everything else L1 writes is on its
tmpfs mounts, which a boot empties, as a host's /run."""


@dataclass(frozen=True)
class NicSpec:
    name: str
    mac: str
    hub: int
    """QEMU hub the NIC's hubport joins. nic0, nic1 and nic3 share hub 0, a wire between L1's
    client side and the device passed through to L2; nic2 sits alone on hub 1."""
    driver: str = "e1000e"


NICS = (
    NicSpec("nic0", "52:54:00:12:00:00", 0),
    NicSpec("nic1", "52:54:00:12:00:01", 0),
    NicSpec("nic2", "52:54:00:12:00:02", 1),
    # A multiqueue NIC (QEMU 7.2 has no igb, and virtio-net's queues need a tap): vmxnet3 gives
    # each of up to 8 queues an MSI-X vector, plus an event vector, through any backend.
    NicSpec("nic3", "52:54:00:12:00:03", 0, "vmxnet3"),
)


@dataclass(frozen=True)
class Files:
    """What a running L1 uses on L0, all in the rig's private temp dir."""

    tmp: Path

    @property
    def console(self) -> Path:
        return self.tmp / "console.log"

    @property
    def qemu_log(self) -> Path:
        return self.tmp / "qemu.log"

    @property
    def agent(self) -> Path:
        return self.tmp / "qga.sock"

    @property
    def qmp(self) -> Path:
        return self.tmp / "qmp.sock"

    @property
    def persist(self) -> Path:
        """The folder L1 keeps across its boots (PERSIST_TAG), where a rig has one."""
        return self.tmp / "persist"


def cmdline(modules_on_l0: Path, keep: Sequence[Path] = (), cached: Sequence[Path] = (),
            kexec: Path | None = None) -> str:
    """`keep`: L0 directories that must stay visible in L1 even under /tmp, /run or /var/tmp,
    which L1 covers with its own tmpfs (the repository and the cache, wherever CI cloned them).
    `cached`: L0 directories nothing changes while the rig runs, which L1 reads through a second
    9p mount that keeps what it read (cache=loose; see CACHED_TAG). `kexec`: for a rig whose L1
    reboots, the unpacked kexec-tools (kexec_tools.py), in a `keep` directory; L1 then also mounts
    the folder it keeps across boots (PERSIST_TAG)."""
    for path in (modules_on_l0, *keep, *cached, *([kexec] if kexec else [])):
        if any(c.isspace() or c == ":" for c in str(path)):
            raise ValueError(f"the kernel command line cannot carry {path!r}")
    return " ".join(
        [
            "console=ttyS0",
            "intel_iommu=on",
            "panic=-1",  # with -no-reboot a panic ends QEMU instead of hanging
            # every Magic SysRq key, for the rig's failures: the blocked tasks of an L1 that hangs (rig.py)
            "sysrq_always_enabled",
            ONE_CPU_AT_BOOT,  # the others come up in l1-init.sh
            # L1's clock from the TSC, which under TCG is L0's own counter: without this its kernel
            # judges the TSC unstable early in the boot and reads the HPET, an emulated device, at every
            # clock read (Python's time.monotonic 125,000-165,000 a second in L1, against 245,000-413,000).
            # Side by side, two of each in turn, test_l2.py with test_kvm_rig.py took 167-172 s with it
            # and 200-205 s without (docs/testing.md).
            "tsc=reliable",
            # The kernel's check that the timer's interrupt comes through the IO-APIC, skipped, as in the
            # harness's own TCG guests (vmharness/guest/instance.py TCG_CMDLINE): under TCG on a busy L0 the
            # interrupt may come too late for it, and the kernel panics ("timer doesn't work through
            # Interrupt-remapped IO-APIC": 7.3's cold boot in a clean clone of 07bd4f9), or, after kexec, stops.
            "no_timer_check",
            # The crypto API's self-tests, skipped as in the harness's TCG guests: L1 came up in 6.5-6.9 s
            # with it against 6.6-7.8 s without (three boots of each in turn).
            "cryptomgr.notests",
            # One 1 GiB page on node 1, reserved at boot as a real host would (test_hugepages_1g.py):
            # at run time none could be had in L1, with 1.5 or 2.5 GiB on node 1, after dropping
            # caches and compacting (some unmovable page sits in every 1 GiB-aligned block). The 2M
            # default and /dev/hugepages stay as they were.
            "hugepagesz=1G",
            "hugepages=1:1",
            f"rig_modules={modules_on_l0}",  # becomes an environment variable of init
            "rig_keep=" + ":".join(str(p) for p in keep),
            "rig_cached=" + ":".join(str(p) for p in cached),
            *(["rig_persist=1", f"rig_kexec={kexec}"] if kexec else []),
        ]
    )


def l1_qemu() -> str:
    """QEMU 10.0 where `make qemu-10` unpacked it (`make test` always does), else the system's 7.2. Side by
    side on this machine's TCG, 10.0 ran the rig's L2 and KVM tests in 83-91 s against 104-148 s
    under 7.2 (docs/testing.md); its `-cpu max` is another CPU model (family 6 where 7.2's is 15), whose
    spectre_v2 line in L1 is the same ("Mitigation: Retpolines") and whose spec_store_bypass line
    reads "Vulnerable" where 7.2's reads "Not affected": either way the same with and without
    `spec_store_bypass_disable=off`, which the host-boot test relies on."""
    found = qemu_10()
    return str(found) if found else "qemu-system-x86_64"


ONE_CPU_AT_BOOT = "maxcpus=1"
"""L1's kernel boots on cpu0 alone; l1-init.sh brings cpus 1-3 up once init runs. Booted on all four,
one of them sometimes kept the timer's vector in service in its local APIC after taking its interrupt:
the end of interrupt never reached it, so that vCPU took no timer interrupt again, and every timer of
its kernel (a sleep, a timeout, RCU's) never expired, with the vCPU halted. That was the hang of L1 read
in the rig (docs/testing.md, 2026-12-01): a boot stopped in e1000e's probe, which sleeps on a CPU of
the NIC's node. It is a race of QEMU's TCG with a thread per vCPU (10.0's here), in the kernel's first seconds,
while each CPU's tick is still periodic. Counted on the development machine 25 s into cold boots (QEMU's
`info lapic`: vector 236 in service, the timer still periodic): 21 boots of 53 had such a vCPU, whatever
else was changed (`tsc=reliable`, SMM off, no vAPIC ROM, no x2APIC, CPU model qemu64); none of 25 with
one TCG thread for all vCPUs, which took L2 under KVM in L1 past ten minutes; none of 11 under QEMU
7.2 (which crashed once in those, and lost such a boot in two clean clones before); none of 11 booted so."""


def qemu_argv(kernel: Path, initrd: Path, append: str, files: Files, persist: bool = False) -> list[str]:
    """Two NUMA nodes (one CPU and three), a DMAR IOMMU, L0's root over 9p, three e1000e
    functions and a vmxnet3: nic0 on pcie.0, nic1+nic2 as functions .0/.1 behind one root port
    on a pxb-pcie expander of NUMA node 1 (behind a root port, the functions share an IOMMU
    group), nic3 behind a second root port there (a group of its own). Node 1's three CPUs hold
    an L2 of two vCPUs, one per queue of nic3, and leave the host one for the NIC's interrupts."""
    nic0, nic1, nic2, nic3 = NICS
    argv = [
        l1_qemu(),
        "-name", HOSTNAME,
        "-machine", "q35,accel=tcg,kernel-irqchip=split",
        "-cpu", "max",
        "-smp", "4,sockets=4,cores=1,threads=1",  # a socket per CPU: no LLC shared across the nodes
        "-m", "3584M",
        "-object", "memory-backend-ram,id=mem0,size=1G",
        # Node 1 holds the NIC, so an L2 guest's hugepages and its QEMU (memory-locked for VFIO,
        # bound to the node) live there: 1 GiB was too little for both, 1.5 GiB is enough. It has
        # 2.5 GiB, of which the 1 GiB page reserved at boot (cmdline) takes one.
        "-object", "memory-backend-ram,id=mem1,size=2560M",
        "-numa", "node,nodeid=0,cpus=0,memdev=mem0",
        "-numa", "node,nodeid=1,cpus=1-3,memdev=mem1",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-kernel", str(kernel),
        "-initrd", str(initrd),
        "-append", append,
        "-chardev", f"file,id=console,path={files.console}",
        "-serial", "chardev:console",
        "-qmp", f"unix:{files.qmp},server=on,wait=off",
        # The IOMMU has to come before the PCI devices it translates for.
        "-device", "intel-iommu,intremap=on,caching-mode=on",
        # Every device gets bus=pcie.0 explicitly: QEMU would otherwise put some
        # of them on the expander's bus and refuse.
        "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pcie.0,addr=0x3",
        "-fsdev", "local,id=hostcached,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", f"virtio-9p-pci,fsdev=hostcached,mount_tag={CACHED_TAG},bus=pcie.0,addr=0x6",
        "-device", "virtio-serial-pci,id=vser0,bus=pcie.0,addr=0x4",
        "-chardev", f"socket,id=agent,path={files.agent},server=on,wait=off",
        "-device", f"virtserialport,bus=vser0.0,chardev=agent,name={AGENT_PORT}",
        "-netdev", f"hubport,id=hp0,hubid={nic0.hub}",
        "-device", f"e1000e,id={nic0.name},netdev=hp0,mac={nic0.mac},bus=pcie.0,addr=0x2",
        "-device", "pxb-pcie,id=pxb1,bus_nr=0x80,numa_node=1,bus=pcie.0,addr=0x5",
        "-device", "pcie-root-port,id=rp1,bus=pxb1,chassis=1,slot=1,addr=0x0",
        "-netdev", f"hubport,id=hp1,hubid={nic1.hub}",
        "-device",
        f"e1000e,id={nic1.name},netdev=hp1,mac={nic1.mac},bus=rp1,addr=0x0.0,multifunction=on",
        "-netdev", f"hubport,id=hp2,hubid={nic2.hub}",
        "-device", f"e1000e,id={nic2.name},netdev=hp2,mac={nic2.mac},bus=rp1,addr=0x0.1",
        "-device", "pcie-root-port,id=rp2,bus=pxb1,chassis=2,slot=2,addr=0x1",
        "-netdev", f"hubport,id=hp3,hubid={nic3.hub}",
        "-device", f"{nic3.driver},id={nic3.name},netdev=hp3,mac={nic3.mac},bus=rp2,addr=0x0",
    ]  # fmt: skip
    if persist:
        argv += ["-fsdev", f"local,id={PERSIST_TAG},path={files.persist},security_model=passthrough",
                 "-device", f"virtio-9p-pci,fsdev={PERSIST_TAG},mount_tag={PERSIST_TAG},bus=pcie.0,addr=0x7"]
    return argv
