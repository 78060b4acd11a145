"""libvirt connections and the removal of a domain the harness defined (used by `vm down` and by
host-restore, which finds the domain in the journal)."""

from __future__ import annotations

import time

import libvirt

from vmharness.errors import HarnessError
from vmharness.model import libvirt_uri

DEFAULT_URI = "qemu:///system"
libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors arrive as exceptions; no stderr noise


def connect(uri: str) -> libvirt.virConnect:
    """A connection to the daemon at `uri`, checked first wherever it came from (a flag, a
    configuration, a journal record or a guest's state file): see vmharness.model.libvirt_uri."""
    libvirt_uri.check(uri, "libvirt URI")
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as exc:
        detail = str(exc).strip().splitlines()[0]
        raise HarnessError(
            f"cannot connect to libvirt at {uri}: {detail}",
            "is libvirtd running there? (systemctl start libvirtd; without systemd: virtlogd -d && libvirtd -d)",
        ) from exc


def lookup(conn: libvirt.virConnect, uuid: str) -> libvirt.virDomain | None:
    try:
        return conn.lookupByUUIDString(uuid)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise


def stop(dom: libvirt.virDomain, grace: float) -> bool:
    """Ask the guest to power off (agent, then ACPI); destroy it if it has not within `grace` seconds
    (at once, unasked, when `grace` is 0). Returns True when it shut down by itself."""
    if not dom.isActive():
        return True
    if grace <= 0:
        _destroy(dom)
        return False
    # libvirt does not fall back to ACPI when the agent answers with an error, so try both in turn;
    # a guest that honours neither is destroyed below.
    for method in (libvirt.VIR_DOMAIN_SHUTDOWN_GUEST_AGENT, libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN):
        try:
            dom.shutdownFlags(method)
            break
        except libvirt.libvirtError:
            continue
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not dom.isActive():
            return True
        time.sleep(0.5)
    _destroy(dom)
    return False


DESTROY_TRIES = 3  # libvirt sends SIGTERM, then SIGKILL, and gives up after some 15 s of either
DESTROY_PAUSE = 2.0


def _destroy(dom: libvirt.virDomain, tries: int = DESTROY_TRIES, pause: float = DESTROY_PAUSE) -> None:
    """Power the domain off, unless it went by itself meanwhile. libvirt gives up on a QEMU that has
    not exited some 15 s after SIGKILL (one in uninterruptible sleep, its I/O held up on a loaded host),
    with the domain still running: asked again, it waits again."""
    for attempt in range(1, tries + 1):
        if not dom.isActive():
            return
        try:
            dom.destroy()
            return
        except libvirt.libvirtError as exc:
            if not dom.isActive():
                return
            if attempt == tries:
                detail = str(exc).strip().splitlines()[-1]
                raise HarnessError(f"libvirt could not power off {dom.name()} ({tries} tries): {detail}",
                                   "its QEMU may wait for I/O (state D in ps); once it has exited, "
                                   "vmharness host-restore gives the rest back") from exc
            time.sleep(pause)


def remove(uri: str, uuid: str, grace: float = 0.0) -> bool:
    """Stop and undefine the domain with this UUID, if it exists. True if there was one."""
    conn = connect(uri)
    try:
        dom = lookup(conn, uuid)
        if dom is None:
            return False
        stop(dom, grace)
        if dom.isPersistent():
            dom.undefine()
        return True
    finally:
        conn.close()
