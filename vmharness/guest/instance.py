"""From what the researcher asked for (a VmRequest) to a DomainSpec: image, kernel, cmdline, devices,
placement, hugepages, accelerator and the management link, each checked with a clear error."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.guest import image, kernelfile, placement
from vmharness.guest.domain import DomainSpec, Link
from vmharness.guest.recipe import load_recipe
from vmharness.guest.record import check_name, domain_name, new_uuid
from vmharness.host.inspect import hugepages, pci, probes
from vmharness.host.libvirt import hugetlbfs
from vmharness.host.prepare.plan import Plan as HostPlan
from vmharness.journal import files
from vmharness.model import vectors
from vmharness.system import imagedir
from vmharness.system.machine import Machine, for_uri
from vmharness.system.root import HostRoot

VM_DIR = files.VM_DIR  # overlay and console log of `vm up` guests, on the VM's machine
VFIO = "vfio-pci"
LINK_RANGE = ipaddress.IPv4Network("198.18.0.0/16")  # half of the benchmarking range 198.18.0.0/15
# Under TCG on a loaded host the emulated timer can tick too slowly for the kernel's check that the
# IO-APIC timer works, and the guest panics at boot ("IO-APIC + timer doesn't work!": a CI run lost an
# iteration so). The kernel's own switch skips that check. And a vCPU held off the host's CPUs can make
# the clocksource watchdog judge the TSC unstable: the guest moves to a clock the vDSO cannot read, and
# every time-of-day read becomes a system call (a CI run's boot read clock_gettime and gettimeofday 1.9
# times a request where no other boot read any). Under TCG the guest's TSC is the host's own counter,
# so `tsc=reliable` (the kernel's switch that turns that watchdog off for the TSC) keeps it.
# And the crypto API's self-tests at boot, skipped (`cryptomgr.notests`): each emulated instruction of
# them costs the boot, and nothing a run measures uses them. The image's guest reached its agent in
# 4.6-4.9 s with it against 5.3-5.4 s without (three boots of each in turn, docs/testing.md).
# All before the researcher's words, which win.
TCG_CMDLINE = "no_timer_check tsc=reliable cryptomgr.notests"
# The image's minimal init (data/images/overlay/usr/local/sbin/vmh-init: mounts, drivers, agent, sshd), which
# `run` boots by default ([guest] init) and `vm up --init minimal` too.
MINIMAL_INIT = "init=/usr/local/sbin/vmh-init"


def with_init(init: str, cmdline: str) -> str:
    """`cmdline` after the minimal init's word where `init` is "minimal" (else as it is): the researcher's
    words last, so that an init= of theirs wins (the kernel takes the last)."""
    return " ".join(filter(None, [MINIMAL_INIT if init == "minimal" else "", cmdline.strip()]))


@dataclass(frozen=True)
class VmRequest:
    name: str = "guest"
    memory_mib: int = 1024
    vcpus: int | None = None
    cmdline: str = ""
    kernel: str | None = None
    initrd: str | None = None
    bdfs: tuple[str, ...] = ()
    managed: bool = False
    hugepages: bool = False
    hugepage_size: str = "2M"
    uri: str = "qemu:///system"
    accel: str = "auto"
    link: bool = True
    image: str | None = None
    image_dir: str | None = None
    cpu_features: tuple[str, ...] = ()
    qemu_args: tuple[str, ...] = ()
    qemu: str | None = None  # the QEMU binary (libvirt's <emulator>); None: the one libvirt finds
    vcpu_cap: int = 0  # percent of a host CPU each vCPU may use; 0: no cap
    state_dir: str | None = None  # where the overlay and console log go; default VM_DIR/<name>
    owner: str = ""  # who defines the domain (a run's id, vm:NAME): kept in its libvirt metadata


def resolve_image(req: VmRequest, must_exist: bool = True) -> image.Image:
    if req.image:
        return image.load_image(Path(req.image))
    recipe = load_recipe()
    images = imagedir.path(req.image_dir)
    found = image.find(recipe, images)
    if found is not None:
        return found
    if must_exist:
        raise HarnessError(f"no image for the current recipe in {images}",
                           "build it first: vmharness image build (or pass --image DIR)")
    return image.Image(images / recipe.key(), {"cmdline": recipe.cmdline, "kernel_release": "?"})


def use_kvm(root: HostRoot, req: VmRequest) -> tuple[bool, str]:
    if req.accel in ("kvm", "tcg"):
        return req.accel == "kvm", f"--accel {req.accel}"
    if req.accel != "auto":
        raise HarnessError(f"unknown accelerator {req.accel!r}", "use auto, kvm or tcg")
    if not for_uri(req.uri).local:
        return True, "a remote server is assumed to have KVM (pass --accel tcg if it has not)"
    kvm = (probes.load(root) or {}).get("kvm")
    if kvm is None:
        return False, "the host root has no KVM probe result: TCG"
    return bool(kvm["usable"]), kvm["detail"]


def _check_device(root: HostRoot, bdf: str, managed: bool, bound: set[str]) -> str:
    """`bound`: devices a host plan moves to vfio-pci before the guest is defined (a preflight)."""
    dev = pci.find(root, bdf)
    if not managed and dev.driver != VFIO and dev.bdf not in bound:
        raise HarnessError(
            f"{dev.bdf} is bound to {dev.driver or 'no driver'}, not {VFIO}",
            f"prepare it: vmharness host-prepare --bdf {dev.bdf}, or pass --managed to let libvirt rebind it")
    return dev.bdf


def _hugepage_kib(req: VmRequest) -> int:
    kib = hugepages.parse_size_kib(req.hugepage_size)
    if kib not in (2048, 1048576):
        raise HarnessError(f"hugepage size {req.hugepage_size!r} is not 2M or 1G", "pass --hugepage-size 2M or 1G")
    return kib


def _vectors(req: VmRequest, release: str) -> None:
    """The attack vectors the cmdline turns off, refused for a kernel known to lack them (model/vectors.py);
    a release not known yet ("?": an image not built) is checked by the run at the guest's boot."""
    if why := vectors.refused(req.cmdline, release):
        raise HarnessError(f"the guest cmdline {req.cmdline[:80]!r}: {why}", vectors.HINT)


def _kernel(req: VmRequest, img: image.Image) -> tuple[str, str | None, list[str]]:
    notes: list[str] = []
    if req.kernel is None:
        if req.initrd:
            raise HarnessError("--initrd needs --kernel", "pass the kernel the initrd was made for")
        _vectors(req, str(img.meta.get("kernel_release") or ""))
        return str(img.boot_kernel), str(img.initrd) if img.initrd else None, notes
    kernel = Path(req.kernel).resolve()
    if not kernel.is_file():
        raise HarnessError(f"no such kernel: {req.kernel}", "pass the path of a bzImage (or a vmlinux with PVH)")
    release = kernelfile.kernel_release(kernel)
    _vectors(req, release)
    if req.initrd and not Path(req.initrd).is_file():
        raise HarnessError(f"no such initrd: {req.initrd}", "pass an initramfs made for " + release)
    if release != img.meta.get("kernel_release"):
        notes.append(f"kernel {release} is not the image's ({img.meta.get('kernel_release')}): its drivers "
                     "must be built in, or build an image with it: vmharness image build --kernel ...")
    return str(kernel), str(Path(req.initrd).resolve()) if req.initrd else None, notes


def link_for(name: str, taken: set[ipaddress.IPv4Network]) -> tuple[Link, tuple[str, str]]:
    """The tap, a stable MAC, and the first free /24 of 198.18.0.0/16 (from .1): host .1, guest .2."""
    digest = hashlib.sha256(name.encode()).digest()
    mac = "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])
    for net in list(LINK_RANGE.subnets(new_prefix=24))[1:]:
        if not any(net.overlaps(t) for t in taken):
            return Link(f"vmh-{name}", mac), (f"{net[1]}/24", f"{net[2]}/24")
    raise HarnessError("no free /24 left in 198.18.0.0/16 for the guest link", "remove unused addresses")


def networks_in_use(machine: Machine) -> set[ipaddress.IPv4Network]:
    out = machine.run(["ip", "-o", "-4", "addr", "show"], timeout=10).stdout
    return {ipaddress.IPv4Interface(m).network for m in re.findall(r"inet (\S+)", out)}


@dataclass(frozen=True)
class Planned:
    spec: DomainSpec
    base_disk: str
    link_net: tuple[str, str] | None
    notes: tuple[str, ...]


def _pages_planned(after: HostPlan | None, node: int | None, page_kib: int, memory_mib: int) -> bool:
    p = after.pages if after is not None else None
    return p is not None and p.node == node and p.size_kib == page_kib and p.needed * page_kib >= memory_mib * 1024


def _libvirt_sees(root: HostRoot, page_kib: int, memory_mib: int, for_print: bool) -> list[str]:
    """Whether the local libvirt daemon sees a hugetlbfs of the guest's page size: said in a preflight;
    before a real boot, made so (a daemon vmharness started is restarted) or refused with the fix."""
    if not for_print:
        line = hugetlbfs.ensure(root, page_kib, f"{memory_mib}M")
        return [f"libvirt: {line}"] if line else []
    seen = hugetlbfs.judge(root, page_kib, f"{memory_mib}M")
    if seen is None:
        return []
    return [f"libvirt: {seen.said}" + (f"; fix: {seen.fix}" if seen.fix else "")]


def plan(root: HostRoot, req: VmRequest, for_print: bool = False, after: HostPlan | None = None,
         offline: tuple[int, ...] = ()) -> Planned:
    """`after`: plan the domain as it would be once this host plan is carried out (`run --print-xml` on a
    host not prepared yet): its devices count as on vfio-pci, its hugepages as reserved. `offline`: CPUs
    the instance's host knobs take away before it boots (SMT off), left out of its placement."""
    check_name(req.name)
    if req.memory_mib < 128:
        raise HarnessError(f"{req.memory_mib} MiB is too little memory for the guest", "pass --memory 512 or more")
    bound = {b.bdf for b in after.binds} if after is not None else set()
    bdfs = tuple(dict.fromkeys(_check_device(root, b, req.managed, bound) for b in req.bdfs))  # each device once
    node_cpus = placement.node_cpus(root, placement.nic_node(root, bdfs)[0], offline)
    place = placement.place(root, bdfs, req.vcpus or min(2, len(node_cpus)), offline)
    page_kib = _hugepage_kib(req) if req.hugepages else None
    notes = []
    if page_kib is not None and not _pages_planned(after, place.node, page_kib, req.memory_mib):
        placement.check_hugepages(root, place.node, page_kib, req.memory_mib)
    if page_kib is not None and after is None and for_uri(req.uri).local:
        notes += _libvirt_sees(root, page_kib, req.memory_mib, for_print)
    img = resolve_image(req, must_exist=not for_print)
    if not img.disk.exists():
        notes.append(f"the image {img.folder} is not built yet")
    kernel, initrd, kernel_notes = _kernel(req, img)  # checked before the KVM probe, which boots a guest
    kvm, why = use_kvm(root, req)
    notes.append(f"accelerator: {'KVM' if kvm else 'TCG'} ({why})")
    notes += kernel_notes
    state = Path(req.state_dir or f"{VM_DIR}/{req.name}")
    link, link_net = None, None
    if req.link:
        taken = set() if for_print else networks_in_use(for_uri(req.uri))
        link, link_net = link_for(req.name, taken)
    cmdline = " ".join(filter(None, [img.cmdline, "" if kvm else TCG_CMDLINE, req.cmdline.strip()]))
    spec = DomainSpec(
        name=domain_name(req.name), uuid=new_uuid(), kvm=kvm, memory_mib=req.memory_mib, placement=place,
        disk=str(state / "overlay.qcow2"), kernel=kernel, initrd=initrd, cmdline=cmdline,
        console_log=str(state / "console.log"), hostdevs=bdfs, managed=req.managed, hugepage_kib=page_kib,
        link=link, cpu_features=req.cpu_features, qemu_args=req.qemu_args,
        vcpu_cap=req.vcpu_cap, emulator=req.qemu,
        metadata={"name": req.name, "image": img.folder.name, **({"owner": req.owner} if req.owner else {})},
    )
    return Planned(spec, str(img.disk), link_net, tuple(notes))
