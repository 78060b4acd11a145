"""Facts that only the live host can answer (is KVM usable, is libvirtd there, which QEMU).

On the live host they are measured; `host-snapshot` stores them in the tarball so that a snapshot
answers the same. A host root that is neither has none, and the checks say so.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
from typing import Any

from vmharness import proc
from vmharness.errors import HarnessError
from vmharness.host import kvm
from vmharness.host.root import HostRoot

PROBES_FILE = "/vmharness-probes.json"
LIBVIRT_SOCKETS = (
    "/run/libvirt/libvirt-sock",
    "/run/libvirt/virtqemud-sock",
    "/var/run/libvirt/libvirt-sock",
)
QEMU = "qemu-system-x86_64"


def libvirtd() -> dict[str, Any]:
    for path in LIBVIRT_SOCKETS:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2.0)
        try:
            s.connect(path)
            return {"reachable": True, "detail": f"accepting connections on {path}"}
        except OSError:
            continue
        finally:
            s.close()
    return {"reachable": False, "detail": "no daemon answers on " + ", ".join(LIBVIRT_SOCKETS[:2])}


def qemu() -> dict[str, Any]:
    path = shutil.which(QEMU)
    if path is None:
        return {"path": None, "version": None}
    try:
        res = proc.run([path, "--version"], timeout=10, check=False)
    except HarnessError as exc:
        return {"path": path, "version": None, "error": exc.message}
    m = re.search(r"version (\S+)", res.stdout)
    return {"path": path, "version": m.group(1) if m else None}


def measure(root: HostRoot) -> dict[str, Any]:
    kvm_state: dict[str, Any]
    if root.exists("/dev/kvm"):
        kvm_state = kvm.probe().to_json()
    else:
        kvm_state = {"usable": False, "detail": "/dev/kvm does not exist"}
    return {"kvm": kvm_state, "libvirtd": libvirtd(), "qemu": qemu()}


def load(root: HostRoot) -> dict[str, Any] | None:
    """Measured now on the live host; read from the snapshot otherwise (None if it has none)."""
    if root.live:
        return measure(root)
    text = root.read_optional(PROBES_FILE)
    if text is None:
        return None
    try:
        data: dict[str, Any] = json.loads(text)
    except ValueError as exc:
        raise HarnessError(f"{PROBES_FILE} in the host root is not JSON", "re-create the snapshot") from exc
    return data
