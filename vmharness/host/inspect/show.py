"""Text views of host-check and host-groups (the JSON views are the objects' to_json)."""

from __future__ import annotations

from vmharness import table
from vmharness.host.inspect.hostcheck.facts import Check
from vmharness.host.inspect.iommu import DeviceView, Group, blocks_vfio

STATUSES = ("PASS", "WARN", "FAIL", "SKIP")


def checks_text(checks: list[Check], where: str) -> str:
    rows: list[list[str]] = []
    for c in checks:
        rows.append([c.name, c.status, c.detail])
        if c.fix and c.status != "PASS":
            rows.append(["", "", f"fix: {c.fix}"])
    counts = ", ".join(f"{sum(c.status == s for c in checks)} {s}" for s in STATUSES)
    lines = [f"host-check on {where}", *table.render(["CHECK", "STATUS", "DETAIL"], rows), "", counts]
    return "\n".join(lines)


def _device_row(v: DeviceView, in_group: bool) -> list[str]:
    d = v.dev
    nets = []
    for n in d.netdevs:
        why = v.active.get(n.name)
        nets.append(f"{n.name} [IN USE: {why.short()}]" if why else n.name)
    if d.sriov_numvfs:
        nets.append(f"SR-IOV {d.sriov_numvfs}/{d.sriov_totalvfs} VFs")
    if d.physfn:
        nets.append(f"VF of {d.physfn}")
    mark = "!" if in_group and blocks_vfio(d) else " "
    return [
        mark + d.bdf,
        d.class_name,
        d.name,
        d.driver or "-",
        "-" if d.numa_node is None else str(d.numa_node),
        ", ".join(nets),
    ]


HEADER = [" BDF", "CLASS", "DEVICE", "DRIVER", "NODE", "NETDEVS"]


def groups_text(groups: list[Group], ungrouped: list[DeviceView]) -> str:
    rows: list[list[str]] = []
    titles: dict[int, list[str]] = {}
    for g in groups:
        if g.viable:
            state = "viable for VFIO"
        else:
            who = ", ".join(f"{d.bdf} ({d.driver})" for d in g.blockers)
            state = f"NOT viable: {who} must leave {'its' if len(g.blockers) == 1 else 'their'} driver"
        extra = []
        for fns in g.multifunction:
            extra.append(f"multi-function device: {', '.join(fns)} share this group and move together")
        titles[len(rows)] = [f"IOMMU group {g.number} ({g.type or 'type ?'}): {state}"] + [
            f"  * {e}" for e in extra
        ]
        rows.extend(_device_row(m, True) for m in g.members)
    lines: list[str] = []
    if not groups:
        lines.append("no IOMMU groups: the kernel has no IOMMU enabled (`vmharness host-check` says why)")
    if ungrouped:
        start = len(rows)
        titles[start] = ["devices in no IOMMU group:" if groups else "PCI devices:"]
        rows.extend(_device_row(v, False) for v in ungrouped)
    rendered = table.render(HEADER, rows, indent="  ")
    lines.append(rendered[0])
    for i, row in enumerate(rendered[1:]):
        lines.extend(titles.get(i, []))
        lines.append(row)
    legend = []
    if any(g.blockers for g in groups):
        legend.append("! = keeps its group from being viable (bound to a host driver)")
    if any(v.active for g in groups for v in g.members) or any(v.active for v in ungrouped):
        legend.append("IN USE = it, or a device stacked on it (bond, bridge, VLAN, macvlan, OVS), holds a route or "
                      "an address (probably how you reach this host)")
    if legend:
        lines += ["", "; ".join(legend)]
    return "\n".join(lines)
