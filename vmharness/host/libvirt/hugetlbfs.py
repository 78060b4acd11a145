"""Whether the libvirt daemon that starts the guests knows a hugetlbfs of a page size, and what makes
it know one.

libvirt's QEMU driver lists the hugetlbfs mounts once, when its daemon (libvirtd, or virtqemud of the
modular daemons) starts: every one in /proc/mounts, or exactly those qemu.conf's `hugetlbfs_mount`
names. A hugetlbfs mounted later is not seen until the daemon restarts (SIGHUP does not reread them),
and a guest with `<page size='1048576'/>` then fails to start ("hugetlbfs filesystem is not mounted or
disabled by administrator config", or "Unable to find any usable hugetlbfs mount for 1048576 KiB").

No API tells which mounts a running daemon holds, so this judges from what the kernel shows, and
refuses when it cannot tell:
- the daemon is the process /run/libvirt/qemu/driver.pid names (the QEMU driver's lock: one per
  host), else the one root process named libvirtd or virtqemud; its start time is /proc/PID/stat's;
- it sees a mount of the page size that was mounted before it started: the hugetlbfs root's ctime
  is set when it is mounted and only ever moved later (a chmod, an entry made in it), so a ctime
  before the daemon's start proves the mount older than the daemon;
- or a mount it has put its `libvirt/qemu` directory in: the driver makes it in every mount it
  lists when a guest starts (libvirt 9.0 does not at its own start: in the rig a daemon restarted
  after the mount left none), and that mkdir moves the ctime past the daemon's start;
- with qemu.conf's hugetlbfs_mount set, only a mount it names counts, and only if qemu.conf has not
  changed since the daemon started (it is read at the start too).
Anything else is "does not see", with the fix: the command that restarts that daemon (its systemd
unit, or its own command line again) and, where qemu.conf leaves the mount out, the line to set.
A daemon that `python -m vmharness.host.libvirt.daemon` started for this process runs no one else's guests:
`ensure` restarts it instead of refusing. These facts are live ones: host-snapshot keeps them among its
probes (`measure`), so that `--dry-run` and `run --print-xml` on a snapshot say what they said on its host.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages, probes
from vmharness.host.libvirt import daemon
from vmharness.system.root import HostRoot

DRIVER_PID = "/run/libvirt/qemu/driver.pid"
QEMU_CONF = "/etc/libvirt/qemu.conf"
DAEMONS = ("libvirtd", "virtqemud")  # the monolithic daemon, and the modular one with the QEMU driver
SLACK = 1.0  # seconds a mount must predate the daemon by: clocks read at different ticks, the wall clock slews
_STARTTIME = 19  # /proc/PID/stat's 22nd field, counted after the ")" that ends the command name


@dataclass(frozen=True)
class Daemon:
    pid: int
    name: str
    started: float  # wall-clock seconds
    argv: tuple[str, ...]
    unit: str | None  # the systemd service it runs in, if any
    owned: bool = False  # started by vmharness.host.libvirt.daemon for this process

    @property
    def label(self) -> str:
        return f"{self.name} (pid {self.pid})"

    def restart(self) -> str:
        """The shell command that restarts it: its guests keep running (the driver finds them again)."""
        if self.unit:
            return f"systemctl restart {self.unit}"
        argv = list(self.argv) or [self.name]
        if not {"-d", "--daemon"} & set(argv[1:]):
            argv.append("-d")
        return (f"kill {self.pid} && while kill -0 {self.pid} 2>/dev/null; do sleep 0.2; done && "
                f"{shlex.join(argv)}")


@dataclass(frozen=True)
class Mounted:
    """A hugetlbfs mount of the page size, as the kernel shows it."""

    path: str
    ctime: float
    libvirt_dir: bool  # libvirt/qemu is in it


@dataclass(frozen=True)
class Conf:
    """qemu.conf's hugetlbfs_mount (None: not set, every mount counts) and when the file last changed."""

    paths: tuple[str, ...] | None
    mtime: float


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


# Reading the facts ------------------------------------------------------------------------------
def _proc_field(root: HostRoot, pid: int, name: str) -> str | None:
    try:
        return root.read_optional(f"/proc/{pid}/{name}")
    except HarnessError:  # the process went away mid-read, or a field too large to be one of these
        return None


def _root_process(root: HostRoot, pid: int) -> bool:
    for line in (_proc_field(root, pid, "status") or "").splitlines():
        if line.startswith("Uid:"):
            return line.split()[1:2] == ["0"]
    return False


def _daemon_pids(root: HostRoot) -> list[int]:
    try:
        text = root.read_optional(DRIVER_PID)
    except HarnessError:  # not root: /proc tells the daemons all the same
        text = None
    if text is not None and is_digits(text) and _proc_field(root, int(text), "comm") in DAEMONS:
        return [int(text)]
    return [int(p) for p in root.listdir("/proc")
            if is_digits(p) and _proc_field(root, int(p), "comm") in DAEMONS and _root_process(root, int(p))]


def read_daemon(root: HostRoot, pid: int, boot: float, owned: int | None) -> Daemon | None:
    """The daemon with this PID; `boot`: the wall-clock time the kernel booted. None if it is gone."""
    stat = _proc_field(root, pid, "stat")
    name = _proc_field(root, pid, "comm")
    fields = (stat or "").rpartition(")")[2].split()
    if name is None or len(fields) <= _STARTTIME or not is_digits(fields[_STARTTIME]):
        return None
    started = boot + int(fields[_STARTTIME]) / os.sysconf("SC_CLK_TCK")
    argv = tuple(a for a in (_proc_field(root, pid, "cmdline") or "").split("\0") if a)
    unit = None
    for line in (_proc_field(root, pid, "cgroup") or "").splitlines():
        m = re.search(r"/([^/]+\.service)$", line)
        if m:
            unit = m.group(1)
    return Daemon(pid, name, started, argv, unit, owned == pid)


def parse_conf(text: str) -> tuple[str, ...] | None:
    """qemu.conf's hugetlbfs_mount: a path or a list of paths (None: not set). Anything else in the
    value is an error: libvirt would not have started with it either."""
    found: list[tuple[str, ...]] = []
    for m in re.finditer(r"^[ \t]*hugetlbfs_mount[ \t]*=[ \t]*", text, re.MULTILINE):
        found.append(_value(text[m.end():]))
    if len(found) > 1:
        raise HarnessError(f"{QEMU_CONF} sets hugetlbfs_mount {len(found)} times",
                           "keep one hugetlbfs_mount line: which one libvirt takes is not clear")
    return found[0] if found else None


_TOKEN = re.compile(r'\s+|#[^\n]*|"([^"\n]*)"|\'([^\'\n]*)\'|[\[\],]')


def _value(rest: str) -> tuple[str, ...]:
    """A quoted string on the line, or [ quoted strings separated by commas ], with comments and
    newlines inside the brackets as libvirt's config parser allows them."""
    tokens: list[str] = []
    pos = 0
    while pos < len(rest):
        m = _TOKEN.match(rest, pos)
        if m is None:
            break  # not a token: refused below
        pos = m.end()
        text = m.group(0)
        if text.isspace() or text[0] == "#":
            if "\n" in text and tokens[:1] != ["["]:
                break  # the line ended
            continue
        tokens.append(text)
        if tokens[0] != "[" or text == "]":
            break  # a string is whole; a list ends at its "]"
    quoted = [t[0] in "\"'" for t in tokens]
    inner = tokens[1:-1]
    if inner and inner[-1] == ",":
        inner = inner[:-1]  # a trailing comma
    is_list = tokens[:1] == ["["] and tokens[-1:] == ["]"] and len(tokens) > 1 and \
        all((t[0] in "\"'") == (i % 2 == 0) for i, t in enumerate(inner)) and (not inner or inner[-1] != ",")
    paths = tuple(t[1:-1] for t, q in zip(tokens, quoted, strict=True) if q)
    if (is_list or quoted == [True]) and all(p.startswith("/") for p in paths):
        return paths
    raise HarnessError(f"{QEMU_CONF}: hugetlbfs_mount is not a path or a list of paths ({rest[:40].strip()!r})",
                       'write it as hugetlbfs_mount = "/dev/hugepages" or ["/dev/hugepages", "/dev/hugepages1G"]')


def read_conf(root: HostRoot) -> Conf:
    try:
        mtime = os.stat(root.path(QEMU_CONF)).st_mtime
    except FileNotFoundError:
        return Conf(None, 0.0)
    except OSError as exc:
        raise HarnessError(f"cannot read {QEMU_CONF}: {exc.strerror}", "run as root (sudo)") from exc
    return Conf(parse_conf(root.read_optional(QEMU_CONF) or ""), mtime)


def _boot_time() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def measure(root: HostRoot) -> dict[str, Any]:
    """What `judge` needs, read now, as JSON: host-snapshot keeps it among the probes, so that a
    snapshot answers as its host did. The daemon (None: none runs), the daemons when several run and
    none holds the driver, qemu.conf's setting, and each hugetlbfs mount's ctime and libvirt/qemu."""
    pids = _daemon_pids(root)
    if len(pids) > 1:
        return {"daemon": None, "several": [f"{_proc_field(root, p, 'comm')}[{p}]" for p in pids]}
    d = read_daemon(root, pids[0], _boot_time(), None) if pids else None
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
