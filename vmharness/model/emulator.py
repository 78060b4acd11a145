"""`qemu`: the QEMU binary that runs a guest (in [guest], every instance's; in an [[instance]], its own),
written into its domain as libvirt's `<emulator>`. Here only the value's form is checked: an absolute
path written plainly (no `.`, `..` or empty parts), because libvirt runs it by that path and a relative
one would mean whatever folder the daemon runs in. What the file is (a regular, executable file in
folders only root can change, a QEMU that answers, with the machine type and CPU model the domain
uses) is checked on the host before anything is taken: host/inspect/qemu_binary.py."""

from __future__ import annotations

from vmharness.model import plainpath

HINT = "write the binary's whole path, e.g. /usr/bin/qemu-system-x86_64; \"\" for the one libvirt finds"


def check_emulator(value: str, where: str) -> str:
    """"" (libvirt's own choice), or an absolute path written plainly (plainpath.py)."""
    if not value:
        return value
    return plainpath.check(value, where, HINT, "the binary")
