"""The judgement whether the libvirt daemon that starts the guests knows a hugetlbfs of a page size, on
facts already read, and what makes it know one.

libvirt's QEMU driver lists the hugetlbfs mounts once, when its daemon (libvirtd, or virtqemud of the
modular daemons) starts: every one in /proc/mounts, or exactly those qemu.conf's `hugetlbfs_mount`
names. A hugetlbfs mounted later is not seen until the daemon restarts (SIGHUP does not reread them),
and a guest with `<page size='1048576'/>` then fails to start ("hugetlbfs filesystem is not mounted or
disabled by administrator config", or "Unable to find any usable hugetlbfs mount for 1048576 KiB").

No API tells which mounts a running daemon holds, so this judges from what the kernel shows, and
refuses when it cannot tell:
- the daemon sees a mount of the page size that was mounted before it started: the hugetlbfs root's
  ctime is set when it is mounted and only ever moved later (a chmod, an entry made in it), so a ctime
  before the daemon's start proves the mount older than the daemon;
- or a mount it has put its `libvirt/qemu` directory in: the driver makes it in every mount it
  lists when a guest starts (libvirt 9.0 does not at its own start: in the rig a daemon restarted
  after the mount left none), and that mkdir moves the ctime past the daemon's start;
- with qemu.conf's hugetlbfs_mount set, only a mount it names counts, and only if qemu.conf has not
  changed since the daemon started (it is read at the start too).
Anything else is "does not see", with the fix: the command that restarts that daemon (its systemd
unit, or its own command line again) and, where qemu.conf leaves the mount out, the line to set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmharness.host.inspect import hugepages
from vmharness.host.libvirt.driver_daemon import Daemon
from vmharness.host.libvirt.qemu_conf import QEMU_CONF, Conf

SLACK = 1.0  # seconds a mount must predate the daemon by: clocks read at different ticks, the wall clock slews


@dataclass(frozen=True)
class Mounted:
    """A hugetlbfs mount of the page size, as the kernel shows it."""

    path: str
    ctime: float
    libvirt_dir: bool  # libvirt/qemu is in it


@dataclass(frozen=True)
class Verdict:
    sees: bool
    said: str  # one line: the daemon, and whether and why it sees the mount
    fix: str = ""  # what makes it see one (empty when it does)
    owned: bool = False  # vmharness started the daemon: `ensure` restarts it
    restart: str = ""  # the command that restarts the daemon

    def to_json(self) -> dict[str, Any]:
        return {"sees": self.sees, "said": self.said, "fix": self.fix, "owned": self.owned, "restart": self.restart}


def decide(d: Daemon, size_kib: int, mounts: list[Mounted], conf: Conf, amount: str,
           planned: str | None = None) -> Verdict:
    """The judgement on facts already read. `mounts`: the mounts of that page size now, in /proc/mounts
    order; `amount`: the memory the guest needs ("8G", for a fix that mounts one); `planned`: a mount of
    that size about to be made (host-prepare's plan)."""
    label = hugepages.size_label(size_kib)
    restart = d.restart()
    listed = mounts if conf.paths is None else [m for m in mounts if m.path in conf.paths]

    def no(said: str, fix: str) -> Verdict:
        if d.owned:
            said += " (vmharness started it: it is restarted before a guest starts)"
        return Verdict(False, said, fix, d.owned, restart)

    if conf.mtime > d.started:
        return no(f"{d.label} started before {QEMU_CONF} last changed: which hugetlbfs mounts it uses is not "
                  "known", f"restart it: {restart}")
    path = planned or (mounts[0].path if mounts else None)
    if conf.paths is not None and not listed and path not in conf.paths:
        if path is None:
            return no(f"no hugetlbfs of pagesize {label} is mounted", f"mount one: vmharness host-prepare "
                      f"--hugepages {amount} --hugepage-size {label}; then set it in {QEMU_CONF} and restart "
                      f"{d.name}")
        paths = ", ".join(f'"{p}"' for p in (*conf.paths, path))
        return no(f"{d.label} uses only the hugetlbfs mounts {QEMU_CONF} names ("
                  f"{', '.join(conf.paths) or 'none'}), and {path} is not one",
                  f"set hugetlbfs_mount = [{paths}] in {QEMU_CONF}, then restart it: {restart}")
    if planned is not None:
        return no(f"{d.label} started before the {label} hugetlbfs at {planned} is mounted: it will not see it",
                  f"once it is mounted, restart it: {restart}")
    for m in listed:
        if m.libvirt_dir:
            return Verdict(True, f"{d.label} sees the {label} hugetlbfs at {m.path} (its libvirt/qemu "
                           "directory is there)", owned=d.owned, restart=restart)
        if m.ctime + SLACK < d.started:
            return Verdict(True, f"{d.label} sees the {label} hugetlbfs at {m.path} (mounted before it "
                           "started)", owned=d.owned, restart=restart)
    if not listed:
        return no(f"no hugetlbfs of pagesize {label} is mounted", f"mount one: vmharness host-prepare "
                  f"--hugepages {amount} --hugepage-size {label}; then restart it: {restart}")
    return no(f"{d.label} started before the {label} hugetlbfs at {listed[0].path} was mounted: it does not "
              "see it", f"restart it: {restart}")
