"""A sampler's stream, as kept raw in a run folder's samples/ (bench/sampler.py writes it): read back by
the sweep to summarise each point's window, and by whoever checks a run's figures against the stream
later. Here is what the stream holds and how it is parsed; what a window's figures are is
rundir/sample_summary.py.

The stream: an `@pid` line (the sampler loop's own PID), then one snapshot per interval, from an
`@t` line (wall time; then `@wake N` in a snapshot that answers the harness's Nth wake) to an `@end`
line: /proc/stat (CPU per CPU), /proc/net/dev, /proc/interrupts,
/proc/softirqs and the stat line of every process, in cat's order. A snapshot cut short (a kill, a
full disk, a read that began inside it) is dropped; a complete one that cannot be read is left out
and named.
"""

from __future__ import annotations

import errno
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from vmharness.digits import is_digits

USER_HZ = 100  # the unit of /proc times on Linux
PAGE = 4096
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class Proc:
    comm: str
    ppid: int
    ticks: int  # utime + stime
    child_ticks: int  # cutime + cstime: children it has waited for
    vsize: int
    rss_pages: int
    started: int = 0  # starttime: clock ticks from boot to its start (the clock /proc/uptime counts on)


@dataclass
class Snapshot:
    t: float
    cpus: dict[str, tuple[int, ...]] = field(default_factory=dict)  # "cpu" (all) and "cpu0".. -> CPU_FIELDS
    net: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # rx bytes, rx pkts, tx bytes, tx pkts
    irq_per_cpu: tuple[int, ...] = ()
    irq_lines: dict[str, tuple[int, ...]] = field(default_factory=dict)  # "IRQ name" -> per CPU
    softirq: dict[str, tuple[int, ...]] = field(default_factory=dict)
    procs: dict[int, Proc] = field(default_factory=dict)
    ctxt: int | None = None  # context switches since boot, all CPUs (/proc/stat's ctxt line)
    page_faults: int | None = None  # page faults since boot, minor and major (/proc/vmstat's pgfault)
    wake: int | None = None  # the harness's wake this snapshot answers (`@wake N`), if one


def proc_line(line: str) -> tuple[int, Proc] | None:
    """A /proc/PID/stat (or /proc/PID/task/TID/stat) line: the PID or TID and its figures; None for
    a line that is not one whole."""
    head, sep, tail = line.rpartition(")")
    if not sep:
        return None
    pid_text, _, comm = head.partition(" (")
    f = tail.split()
    try:
        return int(pid_text), Proc(comm, int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14]),
                                   int(f[20]), int(f[21]), int(f[19]))
    except (ValueError, IndexError):
        return None  # a process that went away mid-read


def _interrupts(lines: list[str], snap: Snapshot) -> None:
    if not lines:
        return
    ncpu = len(lines[0].split())
    totals = [0] * ncpu
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        counts = []
        for value in fields[:ncpu]:
            if not is_digits(value):
                break
            counts.append(int(value))
        if len(counts) != ncpu:
            continue  # ERR:, MIS: and the like
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        label = " ".join(fields[ncpu:])
        snap.irq_lines[f"{name.strip()} {label}".strip()] = tuple(counts)
    snap.irq_per_cpu = tuple(totals)


_PROC_LINE = re.compile(r"[0-9]+ \(")
_CPU_HEADER = re.compile(r"\s+CPU0\b")


def _section(line: str, section: str) -> str | None:
    """The file a line starts, if it starts one (in cat's order: stat, net/dev, interrupts, softirqs,
    vmstat, then the processes' stat lines)."""
    if line.startswith("cpu") and section in ("", "stat"):
        return "stat"
    if line.startswith("Inter-|"):
        return "net"
    if _CPU_HEADER.match(line):
        return "irq" if section != "irq" else "softirq"
    if line.startswith("nr_free_pages "):  # /proc/vmstat's first line
        return "vmstat"
    if _PROC_LINE.match(line):
        return "procs"
    return None


READ_TRIES = 5  # a refused read of the stream tried again, 0.1 s apart (read_from)


def read_from(path: Path, offset: int, size: int = -1) -> bytes:
    """`size` bytes of a stream file from `offset` (to its end with -1). The file grows while it is
    read, by the sampler's own writes, and a network filesystem may then refuse a read for a moment: a
    run folder on 9p under Linux 7.3 answered one with ENODATA (the rig's kexec test, a clean clone of
    4070273), which ended the run with a traceback. That error is tried again; any other, or the last
    try's, is raised."""
    def read() -> bytes:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(size)
    for _ in range(READ_TRIES - 1):
        try:
            return read()
        except OSError as exc:
            if exc.errno != errno.ENODATA:
                raise
            time.sleep(0.1)
    return read()


def has_snapshot_after(path: Path, end: float, wake: int | None = None) -> bool:
    """Whether a sampler's stream file holds a complete snapshot (up to a whole `@end` line) taken at or
    after `end`, or, given `wake`, one that answers it (its `@wake` line): the last one's, read from the
    file's tail (a snapshot is some tens of KiB). The wake is what tells a guest's answer apart, whose
    clock runs some 0.1 s behind this machine's after boot (its RTC gives whole seconds), so that the
    snapshot taken after the load carries a time before the load's end."""
    try:
        tail = b"\n" + read_from(path, max(0, path.stat().st_size - (512 << 10))) + b"\n"
    except OSError:
        return False  # not read: not known to be there (the caller waits to a deadline, then reads)
    stop = tail.rfind(b"\n@end\n")
    start = tail.rfind(b"\n@t ", 0, stop) if stop >= 0 else -1
    if start < 0:
        return False
    if wake is not None and tail.startswith(f"@wake {wake}\n".encode(), tail.index(b"\n", start + 1) + 1):
        return True
    try:
        return float(tail[start + 4:tail.index(b"\n", start + 1)]) >= end
    except ValueError:
        return False


def parse(text: str, damaged: list[tuple[int, str]] | None = None) -> tuple[int | None, list[Snapshot]]:
    """The sampler's PID and its complete snapshots: from an `@t` line to its `@end` line. One without its
    `@end` is dropped unread, wherever it was cut (a kill or a full disk mid-write, or a read that began
    inside it). A complete one that cannot be read (a line cut short mid-stream: the disk filled, then had
    room again) is left out, noted in `damaged` as (its `@t` line's number in `text`, that line: the fault)."""
    pid: int | None = None
    snaps: list[Snapshot] = []
    begun: int | None = None  # the line number of the current snapshot's `@t` line
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("@pid ") and line[5:].isdecimal() and (n < len(lines) or text.endswith("\n")):
            pid = int(line[5:])
        elif line.startswith("@t "):
            begun = n
        elif line == "@end" and begun is not None:
            try:
                snaps.append(_snapshot(lines[begun - 1:n - 1]))
            except (ValueError, IndexError) as exc:
                if damaged is not None:
                    damaged.append((begun, f"{lines[begun - 1]!r}: {exc or type(exc).__name__}"))
            begun = None
    return pid, snaps


def _snapshot(lines: list[str]) -> Snapshot:
    """One complete snapshot from its lines (`@t` first, `@end` left off); ValueError on a damaged one."""
    snap, section, irq_lines = Snapshot(float(lines[0][3:])), "", []
    if not math.isfinite(snap.t):
        raise ValueError(f"its time {lines[0][3:]!r} is not a finite number")
    for line in lines[1:]:
        if line.startswith("@wake ") and not section:
            if not is_digits(line[6:]):
                raise ValueError(f"its wake {line[6:]!r} is not a number")
            snap.wake = int(line[6:])
            continue
        section = _section(line, section) or section
        if section == "stat" and line.startswith("cpu"):
            name, *values = line.split()
            snap.cpus[name] = tuple(int(v) for v in values[:len(CPU_FIELDS)])
        elif section == "stat" and line.startswith("ctxt "):
            snap.ctxt = int(line[5:])
        elif section == "net" and ":" in line and "|" not in line:
            name, _, rest = line.partition(":")
            v = rest.split()
            if len(v) < 16:
                raise ValueError(f"/proc/net/dev line {name.strip()!r} has {len(v)} of its 16 fields")
            snap.net[name.strip()] = (int(v[0]), int(v[1]), int(v[8]), int(v[9]))
        elif section == "irq":
            irq_lines.append(line)
        elif section == "vmstat" and line.startswith("pgfault "):
            snap.page_faults = int(line[8:])
        elif section == "softirq" and ":" in line:
            name, _, rest = line.partition(":")
            snap.softirq[name.strip()] = tuple(int(v) for v in rest.split())
        elif section == "procs" and (parsed := proc_line(line)):
            snap.procs[parsed[0]] = parsed[1]
    _interrupts(irq_lines, snap)
    return snap
