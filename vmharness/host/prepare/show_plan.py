"""Text views of host-prepare's plan and host-restore's pending undo list."""

from __future__ import annotations

from typing import Any

from vmharness.host.inspect import hugepages
from vmharness.host.prepare.plan import VFIO_DRIVER, Plan
from vmharness.journal.restore import describe


def plan_text(plan: Plan, dry_run: bool) -> str:
    lines = ["host-prepare plan" + (" (dry run: nothing is changed)" if dry_run else "")]
    if plan.modules:
        lines.append(f"  load modules: {', '.join(plan.modules)}")
    for group in plan.groups:
        lines.append(f"  IOMMU group {group} -> /dev/vfio/{group}")
        for b in (b for b in plan.binds if b.group == group):
            why = "asked for" if b.named else "same IOMMU group: comes along"
            nets = f"; netdev {', '.join(b.netdevs)}" if b.netdevs else ""
            reset = f"; reset: {' '.join(b.reset_methods) or 'none'}" if b.reset_methods is not None else ""
            lines.append(f"    {b.bdf}  {b.driver or 'no driver'} -> {VFIO_DRIVER}  ({why}{nets}{reset})")
    lines += [f"    {s}" for s in plan.stays]
    p = plan.pages
    if p is not None:
        label = hugepages.size_label(p.size_kib)
        mib = p.needed * p.size_kib // 1024
        change = f"{p.before} -> {p.target}" if p.target != p.before else f"{p.before} (enough already)"
        lines.append(f"  hugepages: node {p.node}, {label} pages {change}; {p.needed} free for the guest ({mib} MiB)")
        if plan.mount:
            lines.append(f"  mount: hugetlbfs pagesize={label} on {plan.mount}")
        else:
            lines.append(f"  mount: {plan.mount_existing} (hugetlbfs, pagesize {label}) is already there")
    if plan.libvirt is not None:
        lines.append(f"  libvirt: {plan.libvirt.said}")
        if plan.libvirt.fix:
            lines.append(f"    fix: {plan.libvirt.fix}")
    lines += [f"  note: {n}" for n in plan.notes]
    lines += [f"  WARNING: {w}" for w in plan.warnings]
    if plan.changes_nothing:
        lines.append("nothing to change: the host is already prepared")
    return "\n".join(lines)


def restore_text(pending: list[dict[str, Any]]) -> str:
    if not pending:
        return "nothing to restore: the journal is empty"
    return "\n".join(["host-restore plan (in undo order)"] + [f"  {describe(r)}" for r in pending])
