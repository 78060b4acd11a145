"""The kernel's folders that more than one layer reads (the host's inspection and snapshot, the
prepared host, the guest's provenance, the tuning inside either): each spelled once. A path that one
module alone reads stays beside its reader."""

from __future__ import annotations

CPU = "/sys/devices/system/cpu"
VULNERABILITIES = f"{CPU}/vulnerabilities"  # one file per issue: "Not affected", "Vulnerable", "Mitigation: ..."
NODES = "/sys/devices/system/node"
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0"  # current_clocksource, available_clocksource
NET = "/sys/class/net"
PCI_DEVICES = "/sys/bus/pci/devices"
