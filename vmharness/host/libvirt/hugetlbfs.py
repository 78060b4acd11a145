"""Whether the libvirt daemon that starts the guests knows a hugetlbfs of a page size, on this host or
as a snapshot recorded it, and making it know one before a guest starts.

The facts are live ones (which daemon runs the QEMU driver and since when: driver_daemon.py;
qemu.conf's hugetlbfs_mount: qemu_conf.py; each hugetlbfs mount's ctime and libvirt/qemu directory):
host-snapshot keeps them among its probes (`measure`), so that `--dry-run` and `run --print-xml` on a
snapshot say what they said on its host; a snapshot's are checked as any input is. The judgement on
them is hugetlbfs_verdict.py's. A daemon that `python -m vmharness.host.libvirt.daemon` started for
this process runs no one else's guests: `ensure` restarts it instead of refusing.
"""

from __future__ import annotations

import os
from typing import Any

from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages, probes
from vmharness.host.libvirt import daemon
from vmharness.host.libvirt.driver_daemon import DRIVER_PID, Daemon, boot_time, daemon_pids, proc_field, read_daemon
from vmharness.host.libvirt.hugetlbfs_verdict import Mounted, Verdict, decide
from vmharness.host.libvirt.qemu_conf import Conf, read_conf
from vmharness.system.root import HostRoot


def measure(root: HostRoot) -> dict[str, Any]:
    """What `judge` needs, read now, as JSON: host-snapshot keeps it among the probes, so that a
    snapshot answers as its host did. The daemon (None: none runs), the daemons when several run and
    none holds the driver, qemu.conf's setting, and each hugetlbfs mount's ctime and libvirt/qemu."""
    pids = daemon_pids(root)
    if len(pids) > 1:
        return {"daemon": None, "several": [f"{proc_field(root, p, 'comm')}[{p}]" for p in pids]}
    d = read_daemon(root, pids[0], boot_time(), None) if pids else None
    if d is None:
        return {"daemon": None}
    out: dict[str, Any] = {"daemon": {"pid": d.pid, "name": d.name, "started": d.started, "argv": list(d.argv),
                                      "unit": d.unit}, "mounts": {}}
    try:
        conf = read_conf(root)
        out["conf"] = {"paths": None if conf.paths is None else list(conf.paths), "mtime": conf.mtime}
    except HarnessError as exc:
        out["conf_error"] = exc.message
    for m in hugepages.mounts(root):
        try:
            ctime = os.stat(root.path(m.path)).st_ctime
        except OSError:
            continue  # gone, or hidden: not a mount that can be judged
        out["mounts"][m.path] = [ctime, root.is_dir(f"{m.path}/libvirt/qemu")]
    return out


def _damaged(what: str) -> HarnessError:
    return HarnessError(f"{probes.PROBES_FILE} in the host root holds a damaged libvirt entry ({what})",
                        "re-create the snapshot with vmharness host-snapshot")


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _facts(root: HostRoot) -> dict[str, Any] | None:
    """Measured on the live host; a snapshot's as host-snapshot recorded them (None: it has none),
    each value checked: a snapshot is input like any other."""
    if root.live:
        return measure(root)
    found = (probes.load(root) or {}).get("libvirt")
    if found is None:
        return None
    if not isinstance(found, dict) or not (found.get("several") is None or _strings(found["several"])):
        raise _damaged("not an object" if not isinstance(found, dict) else "several")
    d, conf, mounts = found.get("daemon"), found.get("conf"), found.get("mounts")
    if d is None:
        return found
    checks = {
        "daemon": isinstance(d, dict) and isinstance(d.get("pid"), int) and isinstance(d.get("name"), str)
        and _number(d.get("started")) and _strings(d.get("argv")) and isinstance(d.get("unit"), (str, type(None))),
        "conf": isinstance(found.get("conf_error"), str) if conf is None else isinstance(conf, dict)
        and _number(conf.get("mtime")) and (conf.get("paths") is None or _strings(conf["paths"])),
        "mounts": isinstance(mounts, dict) and all(isinstance(v, list) and len(v) == 2 and _number(v[0])
                                                   and isinstance(v[1], bool) for v in mounts.values()),
    }
    for name, ok in checks.items():
        if not ok:
            raise _damaged(name)
    return found


def judge(root: HostRoot, size_kib: int, amount: str, planned: str | None = None) -> Verdict | None:
    """Whether the running daemon sees a hugetlbfs of `size_kib` (or will see the mount `planned`),
    on the live host or as a snapshot recorded it. None when no daemon runs (the one started next
    lists the mounts then), or the snapshot recorded nothing."""
    found = _facts(root)
    if found is None:
        return None
    if found.get("several"):
        return Verdict(False, f"several libvirt daemons run ({', '.join(found['several'])}) and {DRIVER_PID} "
                       "names none of them: which one starts the guests is not known",
                       "stop the one that should not run")
    if found["daemon"] is None:
        return None
    raw = found["daemon"]
    d = Daemon(raw["pid"], raw["name"], float(raw["started"]), tuple(raw["argv"]), raw["unit"],
               root.live and daemon.owned_pid() == raw["pid"])
    if "conf_error" in found:
        return Verdict(False, f"whether {d.label} sees a hugetlbfs is not known: {found['conf_error']}",
                       "run as root (sudo)", d.owned, d.restart())
    conf = Conf(None if found["conf"]["paths"] is None else tuple(found["conf"]["paths"]), found["conf"]["mtime"])
    stat = found["mounts"]
    mounts = [Mounted(m.path, *stat[m.path]) for m in hugepages.mounts(root)
              if m.pagesize_kib == size_kib and m.path in stat]
    return decide(d, size_kib, mounts, conf, amount, planned)


def ensure(root: HostRoot, size_kib: int, amount: str) -> str | None:
    """Before a guest on `size_kib` pages starts: the line to say if the daemon sees such a mount; a
    daemon vmharness started is restarted when it does not; otherwise the refusal with the fix."""
    verdict = judge(root, size_kib, amount)
    if verdict is None or verdict.sees:
        return verdict.said if verdict else None
    if verdict.owned:
        pid = daemon.restart_owned()
        again = judge(root, size_kib, amount)
        if again is not None and again.sees:
            return f"restarted the libvirtd vmharness started (now pid {pid}): {again.said}"
        verdict = again or verdict
    raise HarnessError(verdict.said, verdict.fix)
