"""Vendor, device and class names from the pci.ids database, when the machine has one.

Names describe hardware, not host state, so they come from the machine running vmharness, not from
the host root. With no database, callers show the numeric ids alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from vmharness.digits import hexadecimal

SEARCH_PATHS = (
    Path("/usr/share/misc/pci.ids"),
    Path("/usr/share/hwdata/pci.ids"),
    Path("/usr/share/pci.ids"),
)

# PCI base classes (PCI Code and ID Assignment spec), used for --class names and as a fallback.
BASE_CLASSES: dict[int, str] = {
    0x00: "unclassified", 0x01: "storage", 0x02: "network", 0x03: "display",
    0x04: "multimedia", 0x05: "memory", 0x06: "bridge", 0x07: "communication",
    0x08: "system", 0x09: "input", 0x0A: "docking", 0x0B: "processor",
    0x0C: "serial-bus", 0x0D: "wireless", 0x0E: "intelligent", 0x0F: "satellite",
    0x10: "encryption", 0x11: "signal-processing", 0x12: "accelerator",
    0x13: "instrumentation", 0xFF: "unassigned",
}


@dataclass
class PciIds:
    vendors: dict[int, str] = field(default_factory=dict)
    devices: dict[tuple[int, int], str] = field(default_factory=dict)
    classes: dict[tuple[int, int | None], str] = field(default_factory=dict)
    source: str | None = None

    def vendor(self, vendor: int) -> str | None:
        return self.vendors.get(vendor)

    def device(self, vendor: int, device: int) -> str | None:
        return self.devices.get((vendor, device))

    def class_name(self, pci_class: int) -> str:
        base, sub = pci_class >> 16, (pci_class >> 8) & 0xFF
        return (
            self.classes.get((base, sub))
            or self.classes.get((base, None))
            or BASE_CLASSES.get(base, f"class {base:02x}")
        )


def parse(text: str, source: str | None = None) -> PciIds:
    """Parse the pci.ids format: vendors at column 0, devices after one tab, subsystems after two;
    a `C xx` section for classes with subclasses after one tab."""
    ids = PciIds(source=source)
    vendor: int | None = None
    klass: int | None = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("\t\t"):
            continue  # subsystems and programming interfaces are not shown
        if line.startswith("\t"):
            num, _, name = line[1:].partition(" ")
            value = hexadecimal(num, prefix=False)
            if value is None:
                continue
            if klass is not None:
                ids.classes[(klass, value)] = name.strip()
            elif vendor is not None:
                ids.devices[(vendor, value)] = name.strip()
            continue
        if line.startswith("C "):
            num, _, name = line[2:].partition(" ")
            klass, vendor = hexadecimal(num, prefix=False), None
            if klass is not None:
                ids.classes[(klass, None)] = name.strip()
            continue
        num, _, name = line.partition(" ")
        vendor, klass = hexadecimal(num, prefix=False), None
        if vendor is None:
            continue  # other sections (device types, languages): skipped
        ids.vendors[vendor] = name.strip()
    return ids


@lru_cache(maxsize=1)
def load() -> PciIds:
    for path in SEARCH_PATHS:
        if path.is_file():
            return parse(path.read_text(errors="replace"), str(path))
    return PciIds()
