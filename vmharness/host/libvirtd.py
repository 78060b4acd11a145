"""libvirtd on a machine without systemd (CI, containers): started in the foreground when none
answers, stopped by PID at the end. `python -m vmharness.host.libvirtd CMD...` runs CMD with it up.

/dev/kvm gets the group and mode Debian's udev rule gives it (root:kvm 0660) while it runs: without
it libvirt's QEMU user cannot open it, libvirt decides its cached QEMU capabilities are stale, and
re-probes QEMU (about 45 s) on every call."""

from __future__ import annotations

import grp
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vmharness import proc
from vmharness.errors import HarnessError
from vmharness.host import probes

LOG_DIR = Path("/var/log/libvirt")


@contextmanager
def _kvm_as_udev_leaves_it() -> Iterator[None]:
    path = "/dev/kvm"
    if not os.path.exists(path):
        yield
        return
    before = os.stat(path)
    kvm_gid = grp.getgrnam("kvm").gr_gid
    os.chown(path, -1, kvm_gid)
    os.chmod(path, 0o660)
    try:
        yield
    finally:
        os.chown(path, -1, before.st_gid)
        os.chmod(path, before.st_mode & 0o7777)


@contextmanager
def running(timeout: float = 60.0) -> Iterator[None]:
    started: list[subprocess.Popen[bytes]] = []
    with _kvm_as_udev_leaves_it():
        try:
            if not probes.libvirtd()["reachable"]:
                LOG_DIR.mkdir(parents=True, exist_ok=True)
                Path("/run/libvirt").mkdir(parents=True, exist_ok=True)
                for daemon in ("virtlogd", "libvirtd"):
                    with (LOG_DIR / f"{daemon}-vmharness.log").open("ab") as log:
                        started.append(proc.spawn([daemon], stderr=log.fileno(), stdout=log.fileno()))
                deadline = time.monotonic() + timeout
                while not probes.libvirtd()["reachable"]:
                    if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                        raise HarnessError(f"libvirtd did not start; see {LOG_DIR}/libvirtd-vmharness.log",
                                           "is libvirt-daemon-system installed?")
                    time.sleep(0.2)
            yield
        finally:
            for p in reversed(started):
                proc.stop(p, grace=15)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m vmharness.host.libvirtd CMD [ARG...]", file=sys.stderr)
        return 2
    with running():
        return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
