"""Facts that only the live host can answer (is KVM usable, is libvirtd there, which QEMU, libhugetlbfs'
pool list, the SSH session the harness runs in).

On the live host they are measured; `host-snapshot` stores them in the tarball (with what
host/libvirt/hugetlbfs.py measured of the libvirt daemon beside them) so that a snapshot answers the
same. A host root that is neither has none, and the checks say so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Mapping
from typing import Any

from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.host.inspect import kvm
from vmharness.system import proc
from vmharness.system.root import HostRoot

PROBES_FILE = "/vmharness-probes.json"
LIBVIRT_SOCKETS = (
    "/run/libvirt/libvirt-sock",
    "/run/libvirt/virtqemud-sock",
    "/var/run/libvirt/libvirt-sock",
)
QEMU = "qemu-system-x86_64"
HUGEADM = "hugeadm"
HUGEADM_TIMEOUT = 10.0  # seconds; it reads sysfs and /proc/mounts
_ANCESTORS = 64  # how far up the process tree SSH_CONNECTION is looked for


def answers(path: str) -> bool:
    """Whether a daemon accepts connections on the UNIX socket at `path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def libvirtd() -> dict[str, Any]:
    for path in LIBVIRT_SOCKETS:
        if answers(path):
            return {"reachable": True, "detail": f"accepting connections on {path}"}
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


def hugeadm() -> dict[str, Any]:
    """libhugetlbfs' `hugeadm --pool-list`, as printed (host-check parses it), when it is installed."""
    if shutil.which(HUGEADM) is None:
        return {"installed": False}
    try:
        res = proc.run([HUGEADM, "--pool-list"], timeout=HUGEADM_TIMEOUT, check=False)
    except HarnessError as exc:
        return {"installed": True, "error": exc.message}
    if not res.ok:
        return {"installed": True, "error": res.failure().message}
    return {"installed": True, "pool_list": res.stdout}


def ssh_connection(root: HostRoot, env: Mapping[str, str]) -> str | None:
    """SSH_CONNECTION of the session the harness runs in: its own environment's, else its nearest
    ancestor's (sudo leaves SSH_CONNECTION out of the environment it passes on, but the shell that
    ran sudo still has it)."""
    if "SSH_CONNECTION" in env:
        return env["SSH_CONNECTION"]
    pid = os.getppid()
    for _ in range(_ANCESTORS):
        if pid <= 1:
            return None
        try:
            environ = root.read_optional(f"/proc/{pid}/environ") or ""
        except HarnessError:  # larger than a host file may be: look further up
            environ = ""
        for item in environ.split("\0"):
            if item.startswith("SSH_CONNECTION="):
                return item.removeprefix("SSH_CONNECTION=")
        fields = (root.read_optional(f"/proc/{pid}/stat") or "").rpartition(")")[2].split()
        if len(fields) < 2 or not is_digits(fields[1]):
            return None
        pid = int(fields[1])
    return None


def measure(root: HostRoot) -> dict[str, Any]:
    kvm_state: dict[str, Any]
    if root.exists("/dev/kvm"):
        kvm_state = kvm.probe().to_json()
    else:
        kvm_state = {"usable": False, "detail": "/dev/kvm does not exist"}
    return {"kvm": kvm_state, "libvirtd": libvirtd(), "qemu": qemu(), "hugeadm": hugeadm(),
            "ssh_connection": ssh_connection(root, os.environ)}


def load(root: HostRoot) -> dict[str, Any] | None:
    """Measured now on the live host; read from the snapshot otherwise (None if it has none)."""
    if root.live:
        return measure(root)
    text = root.read_optional(PROBES_FILE)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HarnessError(f"{PROBES_FILE} in the host root is not JSON", "re-create the snapshot") from exc
    fault = "it is not a JSON object" if not isinstance(data, dict) else next(
        (f"its {key} entry is not what host-snapshot writes" for key, ok in _SHAPES.items()
         if data.get(key) is not None and not ok(data[key])), None)
    if fault is not None:
        raise HarnessError(f"{PROBES_FILE} in the host root is damaged: {fault}", "re-create the snapshot")
    checked: dict[str, Any] = data
    return checked


def _flag(flag: str) -> Callable[[Any], bool]:
    """{flag: bool, "detail": str}, as kvm and libvirtd are recorded."""
    return lambda v: isinstance(v, dict) and isinstance(v.get(flag), bool) and isinstance(v.get("detail"), str)


# What the readers of a snapshot's probes take for granted (the libvirt and hugeadm entries are checked
# where they are read).
_SHAPES: dict[str, Callable[[Any], bool]] = {
    "kvm": _flag("usable"), "libvirtd": _flag("reachable"),
    "qemu": lambda v: isinstance(v, dict) and all(isinstance(v.get(k), (str, type(None))) for k in ("path", "version")),
}
