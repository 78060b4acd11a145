"""What `vmharness run` takes on the host before its guests boot: the passed-through NICs moved to
vfio-pci with their IOMMU groups, and hugepages for the guest's memory on the NIC's node — the same
plan and journal as `host-prepare`, owned by the run. Whatever the host already had (an earlier
`host-prepare`) is left alone; what the run took is given back at its end, unless it is asked to
keep it: then it is handed over to `host-prepare`, so that no later run reclaims it as a dead run's.

The journal is also the one record of a prepared host: a run given no NIC takes the ones
`host-prepare` moved to vfio-pci (its outstanding `bind` records of the devices it was asked for) and
the hugepages it reserved, confirmed against sysfs, and says so first. There is no second list of
"prepared devices" that could disagree with what host-restore will give back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

from vmharness import progress
from vmharness.errors import HarnessError
from vmharness.guest import placement
from vmharness.host.inspect import hugepages, pci, wire_routes
from vmharness.host.libvirt import hugetlbfs
from vmharness.host.prepare import plan, prepare, show_plan
from vmharness.journal import journal, restore
from vmharness.journal.kinds import OpKind
from vmharness.model import schema
from vmharness.model.sections import HugepageSize, RunConfig
from vmharness.model.wire import wire
from vmharness.system.machine import for_uri
from vmharness.system.root import HostRoot


def request(cfg: RunConfig) -> plan.Request | None:
    g = cfg.guest
    bdfs = () if g.managed else g.bdf
    pages = f"{g.memory}M" if g.hugepages else None
    if not bdfs and pages is None:
        return None
    if not for_uri(g.uri).local:
        raise HarnessError(f"guest.bdf and guest.hugepages are prepared on this machine, but the guests run at "
                           f"{g.uri}", "prepare that machine with `vmharness host-prepare` there and set "
                           "guest.managed, or run vmharness on the server machine")
    return plan.Request(bdfs, pages, g.hugepage_size, "auto")


HOST_OPS = (OpKind.BIND, OpKind.PAGES, OpKind.MOUNT, OpKind.MODULES)
PREPARER = "host-prepare"  # the owner of what host-prepare (or a run kept with --keep-host) holds


@dataclass(frozen=True)
class Prepared:
    """What host-prepare holds now: the NICs it was asked for (each still on vfio-pci) and the hugepage
    pools it reserved, as sysfs shows them."""

    nics: tuple[pci.PciDevice, ...] = ()
    pages: tuple[hugepages.NodePages, ...] = ()


def _mib(size_kib: int) -> str:
    return f"{size_kib >> 20} GiB" if size_kib >= 1 << 20 else f"{size_kib >> 10} MiB"


def nic_text(dev: pci.PciDevice) -> str:
    node = f", node {dev.numa_node}" if dev.numa_node is not None else ""
    return f"{dev.bdf} ({dev.driver or 'no driver'}, group {dev.iommu_group}{node})"


def pages_text(p: hugepages.NodePages) -> str:
    return f"{p.total} × {_mib(p.size_kib)} hugepages on node {p.node}"


def prepared(root: HostRoot) -> Prepared:
    """Read from the journal's outstanding host-prepare records, each confirmed against sysfs: a NIC
    it moved that is no longer on vfio-pci is an error (the record and the host disagree)."""
    held = [r for r in journal.outstanding(journal.read(root)) if r.get("owner") == PREPARER]
    nics = []
    for bdf in dict.fromkeys(r["bdf"] for r in held if r["op"] == OpKind.BIND and r.get("named", True)):
        dev = pci.find(root, bdf) if root.exists(f"/sys/bus/pci/devices/{bdf}") else None
        if dev is None or dev.driver != plan.VFIO_DRIVER:
            now = "gone from the PCI bus" if dev is None else f"bound to {dev.driver or 'no driver'}"
            raise HarnessError(f"host-prepare moved {bdf} to {plan.VFIO_DRIVER}, but it is {now} now",
                               f"give it back and prepare again: vmharness host-restore, then vmharness "
                               f"host-prepare --bdf {bdf}")
        nics.append(dev)
    pools = {(r["node"], r["size_kib"]) for r in held if r["op"] == OpKind.PAGES}
    pages = tuple(p for p in hugepages.per_node(root) if (p.node, p.size_kib) in pools and p.total > 0)
    return Prepared(tuple(nics), pages)


@dataclass(frozen=True)
class Choice:
    """Where the run's NIC and hugepages come from, said on its first line and kept in its manifest."""

    cfg: RunConfig
    source: str  # --bdf, guest.bdf, host-prepare or virtio
    line: str

    def to_json(self) -> dict[str, Any]:
        g = self.cfg.guest
        return {"source": self.source, "said": self.line, "bdf": list(g.bdf), "hugepages": g.hugepages,
                "hugepage_size": g.hugepage_size, "address": g.address, "client_address": g.client_address}


@dataclass(frozen=True)
class Given:
    """Which of the run's settings came from flags, so that an error names what the user typed."""

    bdf: bool = False
    address: bool = False
    client_address: bool = False
    resumed: bool = False  # the configuration is a started run's: nothing new is taken from the host

    def name(self, key: str) -> str:
        return f"--{key.replace('_', '-')}" if getattr(self, key) else f"guest.{key}"


def _size(pool: hugepages.NodePages) -> HugepageSize:
    label = hugepages.size_label(pool.size_kib)
    if label not in schema.choices(HugepageSize):
        raise HarnessError(f"host-prepare reserved {label} hugepages; a guest's memory takes 2M or 1G pages",
                           "vmharness host-restore, then vmharness host-prepare --hugepage-size 2M (or 1G)")
    return cast(HugepageSize, label)


def _pool(found: Prepared, cfg: RunConfig, node: int | None) -> hugepages.NodePages | None:
    """host-prepare's pool on the guest's node, of the configured size when it has one."""
    here = [p for p in found.pages if node is None or p.node == node]
    sized = [p for p in here if hugepages.size_label(p.size_kib) == cfg.guest.hugepage_size]
    return next(iter(sized or here), None)


def choose(root: HostRoot, cfg: RunConfig, given: Given) -> Choice:
    """The run's NICs and hugepages: those it was given (--bdf or guest.bdf), else host-prepare's, else
    none (virtio); then the wire's addresses, defaulted when a NIC is passed through."""
    g = cfg.guest
    if g.bdf:
        source = given.name("bdf")
        if given.resumed:
            source = "guest.bdf of the run's configuration"
        devs = [pci.find(root, b) for b in g.bdf]
        line = f"passing through {', '.join(nic_text(d) for d in devs)} ({source})"
        if g.hugepages:
            line += f", guest memory on {g.hugepage_size} hugepages of its node"
    elif given.resumed:
        source, line = "virtio", "no NIC passed through (none in the run's configuration): wrk reaches the " \
                                 "guest over virtio"
    else:
        found = prepared(root)
        if found.nics:
            source = PREPARER
            node = found.nics[0].numa_node
            pool = _pool(found, cfg, node)
            said = [", ".join(nic_text(d) for d in found.nics)]
            g = dataclasses.replace(g, bdf=tuple(d.bdf for d in found.nics))
            if pool is not None:
                said.append(pages_text(pool))
                g = dataclasses.replace(g, hugepages=True, hugepage_size=_size(pool))
            elif g.hugepages:
                said.append(f"and {g.hugepage_size} hugepages the run reserves on its node")
            line = f"using what host-prepare set up: {', '.join(said)}"
        else:
            source = "virtio"
            line = "no NIC passed through: host-prepare has none and no --bdf was given; wrk reaches the guest " \
                   "over virtio"
            pool = _pool(found, cfg, placement.nic_node(root, ())[0])
            if pool is not None:
                line += f"; guest memory on host-prepare's {pages_text(pool)}"
                g = dataclasses.replace(g, hugepages=True, hugepage_size=_size(pool))
    if g.bdf:
        address, client = wire(g.address, g.client_address, (given.name("address"), given.name("client_address")))
        key = "address" if g.address or not g.client_address else "client_address"
        wire_routes.check(root, address, client, f"{given.name(key)} {getattr(g, key) or address + ' (its default)'}")
        g = dataclasses.replace(g, address=address, client_address=client)
        line += f"; the guest is {address} on it, the clients {client}"
    else:
        for key in ("address", "client_address"):
            if getattr(g, key):
                raise HarnessError(f"{given.name(key)} is an address on a passed-through NIC, and no NIC is "
                                   "passed through", "pass --bdf BDF (or prepare one: vmharness host-prepare "
                                   "--bdf BDF), or drop it: over virtio the guest's link has its own addresses")
    return Choice(dataclasses.replace(cfg, guest=g), source, line)


def _refuse_unseen(the_plan: plan.Plan, req: plan.Request) -> None:
    """Before anything is taken: a libvirt daemon vmharness did not start, which will not see the
    guest's hugetlbfs, is a refusal with its fix. When the run would mount it itself, restarting the
    daemon then would not help (the mount goes with the run): the fix mounts it with host-prepare."""
    seen = the_plan.libvirt
    if seen is None or seen.sees or seen.owned:
        return
    if the_plan.mount is None:
        raise HarnessError(seen.said, seen.fix)
    prepare_it = " ".join(["vmharness host-prepare", *(f"--bdf {b}" for b in req.bdfs),
                           f"--hugepages {req.hugepages}", f"--hugepage-size {req.pagesize}"])
    raise HarnessError(seen.said, f"the run would mount it and unmount it at its end: mount it first with "
                       f"{prepare_it}, then restart the daemon ({seen.restart}), then run again")


def prepare_host(root: HostRoot, cfg: RunConfig, say: progress.Say, owner: str) -> int | None:
    """Prepare what the run needs; returns the journal position to restore back to (None: nothing was
    changed). With hugepages, the libvirt daemon must then see their hugetlbfs (one vmharness started
    is restarted for it). The caller holds the host lock."""
    req = request(cfg)
    if req is None:
        return None
    the_plan = plan.make(root, req)
    for text in show_plan.plan_text(the_plan, dry_run=False).splitlines():
        say(text.strip())
    _refuse_unseen(the_plan, req)
    since = None
    if not the_plan.changes_nothing:
        since = max((r["seq"] for r in journal.read(root)), default=0)
        prepare.execute(root, the_plan, say, owner)
    if the_plan.pages is not None:
        try:
            line = hugetlbfs.ensure(root, the_plan.pages.size_kib, f"{cfg.guest.memory}M")
        except BaseException:
            for problem in restore_host(root, since, say):
                say(f"NOT RESTORED: {problem}")
            raise
        if line and (the_plan.libvirt is None or line != the_plan.libvirt.said):
            say(f"libvirt: {line}")
    return since


def _taken(root: HostRoot, since: int, owner: str) -> list[int]:
    return [r["seq"] for r in journal.outstanding(journal.read(root))
            if r["seq"] > since and r["op"] in HOST_OPS and r.get("owner") == owner]


def keep_host(root: HostRoot, since: int, owner: str) -> None:
    """--keep-host: what the run prepared becomes host-prepare's, left for host-restore."""
    journal.hand_over(root, _taken(root, since, owner), "host-prepare")


def restore_host(root: HostRoot, since: int | None, say: progress.Say) -> list[str]:
    """Give back what `prepare_host` took (journal records after `since`); returns the problems."""
    if since is None:
        return []
    return restore.undo(root, say, only=lambda rec: rec["seq"] > since and rec["op"] in HOST_OPS)
