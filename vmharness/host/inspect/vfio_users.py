"""Who is using a VFIO group already: processes holding /dev/vfio/N open (read on the live host
only: a snapshot has no processes), running libvirt domains whose <hostdev> names a device (from
libvirt's status files, which host-snapshot keeps as `digest` writes them: the PCI devices alone)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from vmharness.digits import hexadecimal, integer, is_digits
from vmharness.system.root import HostRoot

LIBVIRT_RUN = "/run/libvirt/qemu"


def processes(root: HostRoot, group: int) -> list[str]:
    """`comm[pid]` of every process with /dev/vfio/<group> open."""
    if not root.live:
        return []
    target = f"/dev/vfio/{group}"
    users = []
    for pid in root.listdir("/proc"):
        if not is_digits(pid):
            continue
        fd_dir = root.path(f"/proc/{pid}/fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd_dir / fd) == target:
                    comm = root.read_optional(f"/proc/{pid}/comm") or "?"
                    users.append(f"{comm}[{pid}]")
                    break
            except OSError:
                continue
    return users


def _number(text: str) -> int | None:
    """An address part as libvirt writes it: `0x0b` or decimal, in ASCII digits."""
    return hexadecimal(text[2:], prefix=False) if text[:2] in ("0x", "0X") else integer(text)


def _hostdev_bdfs(xml_text: str) -> list[str]:
    try:
        tree = ET.fromstring(xml_text)
    except ET.ParseError:
        return []
    found = []
    for hostdev in tree.iter("hostdev"):
        if hostdev.get("type") != "pci":
            continue
        addr = hostdev.find("source/address")
        if addr is None:
            continue
        parts = [_number(addr.get(k, "0")) for k in ("domain", "bus", "slot", "function")]
        if any(p is None for p in parts):
            continue
        d, b, s, f = (p or 0 for p in parts)
        found.append(f"{d:04x}:{b:02x}:{s:02x}.{f:x}")
    return found


def digest(xml_text: str) -> bytes:
    """A domain's status file cut down to what `domains` reads, its PCI devices, for a snapshot: the
    rest (disk paths, VNC passwords, ...) is not the snapshot's to carry."""
    devices = "".join(f"<hostdev type='pci'><source><address domain='0x{b[:4]}' bus='0x{b[5:7]}' "
                      f"slot='0x{b[8:10]}' function='0x{b[11:]}'/></source></hostdev>"
                      for b in _hostdev_bdfs(xml_text))
    return f"<domstatus><domain><devices>{devices}</devices></domain></domstatus>\n".encode()


def domains(root: HostRoot, bdfs: set[str]) -> list[str]:
    """`domain (bdf)` for each running libvirt domain that has one of these devices."""
    users = []
    for name in root.listdir(LIBVIRT_RUN):
        if name.endswith(".xml"):
            for bdf in _hostdev_bdfs(root.read_optional(f"{LIBVIRT_RUN}/{name}") or ""):
                if bdf in bdfs:
                    users.append(f"libvirt domain {name[:-4]} ({bdf})")
    return users
