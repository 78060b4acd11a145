"""host-prepare's plan: every change decided, and every refusal raised, before anything is touched."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages, iommu, modules, vfio_users
from vmharness.host.inspect.hostcheck.facts import FAIL, gather
from vmharness.host.inspect.hostcheck.passthrough import iommu_firmware, iommu_kernel
from vmharness.host.inspect.net import survey
from vmharness.host.inspect.net.held import Held
from vmharness.host.inspect.net.verdict import InUse, in_use
from vmharness.host.inspect.pci import PciDevice, find, read_device
from vmharness.host.libvirt import hugetlbfs
from vmharness.host.libvirt.hugetlbfs_verdict import Verdict
from vmharness.journal import journal
from vmharness.journal.kinds import OpKind
from vmharness.model.bdf import parse_bdf
from vmharness.system.root import HostRoot

VFIO_DRIVER = "vfio-pci"
VFIO_MODULES = ("vfio-pci", "vfio_iommu_type1")
MOUNT_BASE = "/run/vmharness"
MAX_AMOUNT_KIB = 16 << 30  # 16 TiB: more memory than any one NUMA node holds
MAX_NODE = 1023  # the kernel's MAX_NUMNODES is at most 1024
_AMOUNT = re.compile(r"([0-9]{1,12})([KMGT])(?:i?B)?", re.IGNORECASE | re.ASCII)
_UNIT_KIB = {"k": 1, "m": 1 << 10, "g": 1 << 20, "t": 1 << 30}


def parse_amount(text: str, where: str = "--hugepages") -> int:
    """An amount of memory with its unit, `512M`, `8G`, `1T` (or `8GiB`), in KiB. A bare number is
    refused: `1500` could mean pages, MiB or bytes."""
    m = _AMOUNT.fullmatch(text)
    kib = int(m.group(1)) * _UNIT_KIB[m.group(2).lower()] if m else 0
    if not m or not 0 < kib <= MAX_AMOUNT_KIB:
        raise HarnessError(f"{where} {text[:40]!r} is not an amount of memory (with a unit, at most 16T)",
                           "write it as 512M or 8G")
    return kib


def parse_node(text: str, where: str = "--node") -> int | None:
    """`auto` (None: the NIC's node) or a NUMA node number."""
    if text == "auto":
        return None
    if not re.fullmatch(r"[0-9]{1,4}", text) or int(text) > MAX_NODE:
        raise HarnessError(f"{where} {text[:40]!r} is not a NUMA node", "write auto (the NIC's node) or a node "
                           "number such as 0 or 1 (`lscpu` lists them)")
    return int(text)


@dataclass(frozen=True)
class Request:
    """What host-prepare (or run) is asked for, each value checked as it is given."""

    bdfs: tuple[str, ...]
    hugepages: str | None = None  # an amount of memory: "512M", "8G"
    pagesize: str = "2M"
    node: str = "auto"
    force: bool = False

    def __post_init__(self) -> None:
        # one device named twice (`--bdf 0000:b3:00.0 --bdf b3:00.0`) is one device: normalised, then each once
        object.__setattr__(self, "bdfs", tuple(dict.fromkeys(parse_bdf(bdf, "--bdf") for bdf in self.bdfs)))
        if self.hugepages is not None:
            parse_amount(self.hugepages)
        parse_node(self.node)


@dataclass(frozen=True)
class Bind:
    bdf: str
    group: int
    driver: str | None
    override: str | None
    named: bool  # asked for on the command line, or brought along by its group
    netdevs: tuple[str, ...]
    reset_methods: tuple[str, ...] | None


@dataclass(frozen=True)
class Pages:
    node: int
    size_kib: int
    before: int  # nr_hugepages now
    free: int
    target: int  # nr_hugepages to set so that `needed` pages are free
    needed: int


@dataclass
class Plan:
    modules: list[str] = field(default_factory=list)
    binds: list[Bind] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    stays: list[str] = field(default_factory=list)
    pages: Pages | None = None
    mount: str | None = None  # a hugetlbfs mount to make
    mount_existing: str | None = None
    libvirt: Verdict | None = None  # whether the running libvirt daemon sees the mount
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changes_nothing(self) -> bool:
        return not (self.modules or self.binds or self.mount or (self.pages and self.pages.target != self.pages.before))

    def to_json(self) -> dict[str, Any]:
        return {
            "modules": self.modules,
            "binds": [vars(b) | {"to": VFIO_DRIVER} for b in self.binds],
            "groups": self.groups,
            "stays": self.stays,
            "hugepages": vars(self.pages) if self.pages else None,
            "mount": self.mount,
            "mount_existing": self.mount_existing,
            "libvirt": self.libvirt.to_json() if self.libvirt else None,
            "warnings": self.warnings,
            "notes": self.notes,
        }


def _iommu_on(root: HostRoot) -> None:
    facts = gather(root)
    for check in (iommu_firmware, iommu_kernel):
        c = check(facts)
        if c.status == FAIL:
            half = "firmware" if check is iommu_firmware else "kernel"
            raise HarnessError(f"the IOMMU is off in the {half}: {c.detail}", c.fix)


def _endpoint(dev: PciDevice) -> None:
    if dev.is_bridge:
        raise HarnessError(f"{dev.bdf} is a {dev.class_name}, not an endpoint device",
                           "pass the NIC's own address; `vmharness host-groups --class network` lists them")
    if dev.iommu_group is None:
        raise HarnessError(f"{dev.bdf} is in no IOMMU group", "`vmharness host-check` says why the IOMMU is off")
    if dev.sriov_numvfs:
        raise HarnessError(f"{dev.bdf} has {dev.sriov_numvfs} SR-IOV VFs active: unbinding it would destroy them",
                           f"pass a VF's address instead, or echo 0 > /sys/bus/pci/devices/{dev.bdf}/sriov_numvfs")


def group_members(root: HostRoot, group: int) -> list[PciDevice]:
    return [read_device(root, bdf) for bdf in root.listdir(f"{iommu.GROUPS}/{group}/devices")
            if root.exists(f"/sys/bus/pci/devices/{bdf}")]


def _whose(why: InUse, held: Held) -> str:
    """Whether the SSH session is on this interface's stack, as far as the host can tell."""
    if why.ssh:
        return "this is your SSH connection"
    if held.ssh_iface is not None:
        return f"the host uses it (your SSH connection leaves by {held.ssh_iface})"
    return "this is probably your SSH connection"


def refuse_in_use(root: HostRoot, group: int | None, members: list[PciDevice], req: Request, plan: Plan) -> None:
    held = survey.reasons(root)
    for dev in members:
        for n in dev.netdevs:
            why = in_use(root, n.name, held)
            if why is None:
                continue
            text = why.text(f"{dev.bdf} ({n.name})")
            if not req.force:
                raise HarnessError(f"{text}: {_whose(why, held)}", "pass another NIC, or --force if you are "
                                   "sure nothing needs it (its group, and all that is stacked on it, go with it)")
            plan.warnings.append(f"--force: {text}; it will lose it")
    users = vfio_users.processes(root, group) if group is not None else []
    users += vfio_users.domains(root, {d.bdf for d in members})
    if users:
        raise HarnessError(f"IOMMU group {group} is in use by {', '.join(users)}",
                           "stop that VM or program first; vmharness will not take a device from a running guest")


@dataclass(frozen=True)
class PageRequest:
    """--hugepages/--hugepage-size/--node checked against the host: used by host-prepare for run-time
    pages and by host-setup for boot-time ones."""

    node: int
    size_kib: int
    needed: int
    why: str  # how the node was chosen

    @property
    def label(self) -> str:
        return hugepages.size_label(self.size_kib)


def page_request(root: HostRoot, req: Request, devices: list[PciDevice]) -> PageRequest | None:
    if req.hugepages is None:
        return None
    size_kib = hugepages.parse_size_kib(req.pagesize)
    if size_kib is None or size_kib not in hugepages.sizes(root):
        have = ", ".join(hugepages.size_label(k) for k in hugepages.sizes(root)) or "none"
        raise HarnessError(f"hugepage size {req.pagesize!r} is not supported here (this host has: {have})",
                           "pass --hugepage-size 2M or 1G")
    amount = parse_amount(req.hugepages)
    nodes = hugepages.nodes(root)
    asked = parse_node(req.node)
    if asked is None:
        node_of = [d.numa_node for d in devices if d.numa_node is not None]
        node = node_of[0] if node_of else (nodes[0] if nodes else 0)
        why = "the NIC's node" if node_of else "no NUMA information: node 0"
    else:
        if asked not in nodes:
            raise HarnessError(f"--node {asked} is not a NUMA node of this host",
                               f"nodes here: {', '.join(map(str, nodes))} (or auto: the NIC's node)")
        node, why = asked, "--node"
    pr = PageRequest(node, size_kib, math.ceil(amount / size_kib), why)
    total_kib, _ = hugepages.node_memory_kib(root, node)
    if total_kib is not None and pr.needed * size_kib > total_kib:
        raise HarnessError(
            f"{pr.needed} x {pr.label} pages do not fit on node {node}, which has {total_kib // 1024} MiB in all",
            "ask for less, or another --node")
    return pr


def _pages(root: HostRoot, req: Request, devices: list[PciDevice], plan: Plan) -> None:
    pr = page_request(root, req, devices)
    if pr is None:
        return
    node, size_kib, needed = pr.node, pr.size_kib, pr.needed
    state = next((p for p in hugepages.per_node(root) if p.node == node and p.size_kib == size_kib), None)
    if state is None:
        raise HarnessError(f"node {node} has no {pr.label} hugepage counters",
                           "this kernel lacks per-node hugepage control")
    _, free_kib = hugepages.node_memory_kib(root, node)
    target = max(state.total, state.total - state.free + needed)
    if free_kib is not None and (target - state.total) * size_kib > free_kib:
        plan.warnings.append(f"node {node} has {free_kib // 1024} MiB free for "
                             f"{(target - state.total) * size_kib // 1024} MiB of new pages: may fall short")
    plan.pages = Pages(node, size_kib, state.total, state.free, target, needed)
    plan.notes.append(f"hugepages on node {node} ({pr.why})")
    mounts = [m for m in hugepages.mounts(root) if m.pagesize_kib == size_kib]
    if mounts:
        plan.mount_existing = mounts[0].path
    else:
        plan.mount = f"{MOUNT_BASE}/hugepages-{pr.label}"
    plan.libvirt = hugetlbfs.judge(root, size_kib, hugepages.size_label(needed * size_kib), plan.mount)


def make(root: HostRoot, req: Request) -> Plan:
    if not req.bdfs and req.hugepages is None:
        raise HarnessError("nothing to prepare", "name a device with --bdf, or hugepages with --hugepages")
    plan = Plan()
    named = [find(root, b) for b in req.bdfs]
    if named:
        _iommu_on(root)
    for dev in named:
        _endpoint(dev)
    ours = {r.get("bdf") for r in journal.read(root) if r.get("op") == OpKind.BIND}
    for group in sorted({d.iommu_group for d in named if d.iommu_group is not None}):
        members = group_members(root, group)
        plan.groups.append(group)
        for dev in members:
            if dev.is_bridge:
                if dev.driver not in iommu.HARMLESS_DRIVERS and dev.driver is not None:
                    raise HarnessError(f"bridge {dev.bdf} in IOMMU group {group} is bound to {dev.driver}",
                                       "VFIO accepts bridges only on pcieport or without a driver")
                plan.stays.append(f"{dev.bdf} ({dev.class_name}, {dev.driver or 'no driver'}) stays")
            elif dev.sriov_numvfs:
                _endpoint(dev)
        refuse_in_use(root, group, [d for d in members if not d.is_bridge], req, plan)
        for dev in members:
            if dev.is_bridge:
                continue
            if dev.driver == VFIO_DRIVER:
                whose = "prepared earlier by vmharness" if dev.bdf in ours else "not by vmharness; left as is"
                plan.notes.append(f"{dev.bdf} is already on {VFIO_DRIVER} ({whose})")
                continue
            plan.binds.append(Bind(dev.bdf, group, dev.driver, dev.driver_override, dev in named,
                                   tuple(n.name for n in dev.netdevs), dev.reset_methods))
    for b in plan.binds:
        if b.reset_methods is not None and "flr" not in b.reset_methods:
            plan.warnings.append(f"{b.bdf} has no FLR (reset methods: {' '.join(b.reset_methods) or 'none'}): "
                                 "the guest may see it in the state the last user left")
    if plan.binds:
        plan.modules = [m for m in VFIO_MODULES if modules.state(root, m).state not in ("loaded", "built-in")]
        missing = [m for m in VFIO_MODULES if not modules.state(root, m).available]
        if missing:
            raise HarnessError(f"{', '.join(missing)}: {modules.state(root, missing[0]).detail}",
                               "install the kernel's modules package, or use a kernel with CONFIG_VFIO_PCI")
    _pages(root, req, named, plan)
    return plan
