"""How the host's network devices are stacked, read from every link the kernel offers (`upper_*`/`lower_*`,
`master`, a bridge's `brif/`, a bond's `bonding/slaves`, `/proc/net/vlan/config`), because each kind of
device shows itself through a different subset; and the walk up that stack from one interface.

Unbinding a NIC takes down everything stacked on it, so a port counts as holding what any device
above it holds: `ens1f0 → bond0 → vmbr0` holds vmbr0's address.

Open vSwitch is the exception: its ports are linked to the datapath device (`ovs-system`), never to
the bridge's own interface (`br-ex`), which is an internal port that no sysfs link ties to its
bridge. So the walk leads from the datapath to every interface that may be an OVS bridge's.
"""

from __future__ import annotations

from vmharness.environ import CONTROL
from vmharness.errors import HarnessError
from vmharness.host.inspect.net.held import Held
from vmharness.system import sysfs
from vmharness.system.root import HostRoot

NET = sysfs.NET
VIRTUAL = "/sys/devices/virtual/net/"
VLAN_CONFIG = "/proc/net/vlan/config"
OVS_DATAPATH = "ovs-system"  # the kernel datapath every bridge of ovs-vswitchd shares


def read(root: HostRoot, held: Held) -> None:
    """Fill `held.uppers` from every link the kernel offers, and list the possible OVS bridge
    interfaces. An interface whose links cannot be read is noted in `held.stack_unknown`."""
    candidates: list[str] = []
    for name in root.listdir(NET):
        d = f"{NET}/{name}"
        if name == "bonding_masters":
            continue  # the bonding driver's control file, not a device
        try:
            if not root.is_dir(d):
                held.stack_fault(name, f"{d} leads to no device directory")
                continue
            entries = root.listdir(d)
            for entry in entries:
                if entry.startswith("upper_"):
                    held.link(name, entry.removeprefix("upper_"))
                elif entry.startswith("lower_"):
                    held.link(entry.removeprefix("lower_"), name)
            master = root.readlink_name(f"{d}/master")
            if master is not None:
                held.link(name, master)
            for port in root.listdir(f"{d}/brif"):
                held.link(port, name)
            if "bonding" in entries:
                slaves = root.read_optional(f"{d}/bonding/slaves")
                if slaves is None:
                    held.stack_fault(name, f"{d}/bonding/slaves cannot be read")
                for slave in (slaves or "").split():
                    held.link(slave, name)
            # An OVS bridge's own interface is a virtual device on nothing, in no master, and neither
            # a Linux bridge nor a bond; sysfs cannot tell it from a dummy or a tun, so those count too.
            if (root.realpath(d).startswith(VIRTUAL) and name not in ("lo", OVS_DATAPATH)
                    and master is None and "bridge" not in entries and "bonding" not in entries
                    and not any(e.startswith("lower_") for e in entries)):
                candidates.append(name)
        except HarnessError as exc:
            held.stack_fault(name, exc.message)
    _vlans(root, held)
    stacked = {upper for above in held.uppers.values() for upper in above}
    held.ovs_bridges = [c for c in candidates if c not in stacked]


def _vlans(root: HostRoot, held: Held) -> None:
    """802.1Q devices from /proc/net/vlan/config (absent when the 8021q module is not loaded)."""
    text = root.read_optional(VLAN_CONFIG)
    if text is None:
        return
    lines = text.splitlines()
    if not lines or not lines[0].startswith("VLAN Dev name"):
        held.garbled(VLAN_CONFIG, 1, lines[0] if lines else "")
        return
    for n, line in enumerate(lines[1:], 2):
        if not line.strip() or line.startswith("Name-Type:"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0] or not parts[2] or " " in parts[0] + parts[2] or CONTROL.search(line):
            held.garbled(VLAN_CONFIG, n, line)
            continue
        held.link(parts[2], parts[0])


def chains(iface: str, held: Held) -> dict[str, tuple[str, ...]]:
    """Every device that goes down with `iface`, each with its chain from `iface`, nearest first.
    The OVS datapath leads to every possible OVS bridge interface."""
    chains: dict[str, tuple[str, ...]] = {iface: (iface,)}
    todo = [iface]
    while todo:
        name = todo.pop(0)
        above = held.uppers.get(name, []) + (held.ovs_bridges if name == OVS_DATAPATH else [])
        for upper in above:
            if upper not in chains:
                chains[upper] = (*chains[name], upper)
                todo.append(upper)
    return chains
