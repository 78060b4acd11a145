"""host-prepare: carry out a plan, each change journaled before it is made and tagged with its owner
(`host-prepare`, or the run that prepares the host for itself); on any failure or interrupt, undo
what was done before reporting the error."""

from __future__ import annotations

import os

from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages
from vmharness.host.prepare import bind, kmod, pages
from vmharness.host.prepare.plan import VFIO_DRIVER, Plan
from vmharness.journal import journal, restore
from vmharness.journal.kinds import OpKind
from vmharness.progress import Say
from vmharness.system import proc
from vmharness.system.root import HostRoot


def _modules(root: HostRoot, plan: Plan, say: Say, owner: str) -> None:
    if not plan.modules:
        return
    before = kmod.loaded(root)
    journal.record(root, {"op": OpKind.MODULES, "names": plan.modules, "loaded_before": before}, owner)
    for name in plan.modules:
        kmod.load(name)
    brought = kmod.brought_along(root, plan.modules, set(before))
    say(f"loaded modules: {', '.join(sorted(brought)) or 'none needed'}")


def _binds(root: HostRoot, plan: Plan, say: Say, owner: str) -> None:
    for b in plan.binds:
        netdevs = [{"name": n, "flags": root.read_optional(f"/sys/class/net/{n}/flags"),
                    "mtu": root.read_optional(f"/sys/class/net/{n}/mtu")} for n in b.netdevs]
        journal.record(root, {"op": OpKind.BIND, "bdf": b.bdf, "driver": b.driver, "override": b.override,
                              "netdevs": netdevs, "named": b.named}, owner)  # named: a run takes it
        bind.to_driver(root, b.bdf, VFIO_DRIVER, VFIO_DRIVER)
        say(f"{b.bdf}: {b.driver or 'no driver'} -> {VFIO_DRIVER}")
    for group in plan.groups:
        if not bind.wait_for(root, f"/dev/vfio/{group}"):
            raise HarnessError(f"/dev/vfio/{group} did not appear although the group is on {VFIO_DRIVER}",
                               "is vfio_iommu_type1 loaded? dmesg says more")
        say(f"/dev/vfio/{group} is ready")


def _pages(root: HostRoot, plan: Plan, say: Say, owner: str) -> None:
    p = plan.pages
    if p is None or p.target == p.before:
        return
    label = hugepages.size_label(p.size_kib)
    journal.record(root, {"op": OpKind.PAGES, "node": p.node, "size_kib": p.size_kib, "before": p.before}, owner)
    got = pages.set_pages(root, p.node, p.size_kib, p.target)
    if got < p.target:
        say(f"node {p.node}: {got - p.before} of {p.target - p.before} {label} pages; compacting memory")
        root.write_text("/proc/sys/vm/compact_memory", "1")
        got = pages.set_pages(root, p.node, p.size_kib, p.target)
    if got < p.target:
        raise HarnessError(
            f"asked {p.target - p.before} {label} hugepages on node {p.node}, got {got - p.before}",
            f"reserve them at boot: hugepagesz={label} hugepages={p.node}:{p.target} on the kernel cmdline "
            "(vmharness host-setup --print)")
    say(f"node {p.node}: {p.target} x {label} hugepages ({p.needed} free for the guest)")


def _mount(root: HostRoot, plan: Plan, say: Say, owner: str) -> None:
    if plan.mount is None or plan.pages is None:
        return
    path = root.writable(plan.mount, "mount on")
    journal.record(root, {"op": OpKind.MOUNT, "path": plan.mount, "created": not path.exists()}, owner)
    root.mkdir(plan.mount)
    label = hugepages.size_label(plan.pages.size_kib)
    proc.run(["mount", "-t", "hugetlbfs", "-o", f"pagesize={label}", "vmharness", str(path)], timeout=30)
    say(f"mounted hugetlbfs (pagesize {label}) on {plan.mount}")


def execute(root: HostRoot, plan: Plan, say: Say, owner: str = "host-prepare") -> None:
    """Apply the plan for `owner`; the caller holds `journal.Lock` from planning to here. Any failure,
    Ctrl-C, SIGTERM or SIGHUP undoes every change made so far, then re-raises; a SIGKILL leaves the
    journal for `host-restore` (or, for a run, the next run)."""
    begin = journal.record(root, {"op": OpKind.BEGIN, "pid": os.getpid()})["seq"]
    try:
        for step in (_modules, _binds, _pages, _mount):
            step(root, plan, say, owner)
    except (Exception, KeyboardInterrupt) as exc:
        say(f"failed ({exc}); undoing what was done")
        restore.undo(root, say, only=lambda rec: rec["seq"] > begin)  # not what an earlier prepare did
        if isinstance(exc, KeyboardInterrupt):
            raise HarnessError("interrupted: every change was undone", "") from exc
        raise
