"""Loading and unloading kernel modules with modprobe, remembering which ones were already there."""

from __future__ import annotations

from vmharness import proc
from vmharness.host.root import HostRoot

MODPROBE_TIMEOUT = 60.0


def loaded(root: HostRoot) -> list[str]:
    """Names of loaded modules, from /proc/modules."""
    text = root.read_optional("/proc/modules") or ""
    return sorted(line.split()[0] for line in text.splitlines() if line.strip())


def load(name: str) -> None:
    proc.run(["modprobe", name], timeout=MODPROBE_TIMEOUT)


def unload(name: str) -> str | None:
    """`modprobe -r` (which also removes dependencies nothing else uses); the reason when it cannot."""
    res = proc.run(["modprobe", "-r", name], timeout=MODPROBE_TIMEOUT, check=False)
    if res.ok:
        return None
    return (res.stderr.strip() or res.stdout.strip() or f"exit {res.returncode}").splitlines()[-1]
