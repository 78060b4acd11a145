"""A PCI address as a user writes it (`--bdf`, guest.bdf): DDDD:BB:DD.F or BB:DD.F, checked and made
canonical once, so that one device written two ways is one device."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

_BDF = re.compile(r"(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


def parse_bdf(text: str, where: str = "") -> str:
    """Normalise `DDDD:BB:DD.F` or `BB:DD.F` to lower-case `DDDD:BB:DD.F`; `where` (a flag or a setting)
    is named in the error."""
    m = _BDF.fullmatch(text)
    shown = f"{where} {text[:40]!r}" if where else repr(text[:40])
    if not m:
        raise HarnessError(
            f"{shown} is not a PCI address",
            "write it as DDDD:BB:DD.F or BB:DD.F, e.g. 0000:b3:00.0 (see `lspci -D`)",
        )
    domain, bus, dev, fn = m.groups()
    if int(dev, 16) > 0x1F:
        raise HarnessError(
            f"{shown} is not a PCI address: device number {dev} is above 1f",
            "the device part of DDDD:BB:DD.F runs from 00 to 1f",
        )
    return f"{(domain or '0000').lower()}:{bus.lower()}:{dev.lower()}.{fn}"
