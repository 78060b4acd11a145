"""A running guest, asked and steered: its libvirt domain, its vCPU threads' CPU time, the time they
waited for a host CPU, its QEMU's CPU time outside them, and their cap, KVM's counters of its VM exits,
the CPUs its QEMU threads may run on, and the tail of its console log."""

from __future__ import annotations

import re
from typing import Any

import libvirt

from vmharness.errors import HarnessError
from vmharness.guest.domain import CAP_PERIOD_US, cap_quota
from vmharness.guest.record import Guest, domain_name
from vmharness.host.libvirt import api
from vmharness.system.machine import Machine


def domain(guest: Guest) -> tuple[libvirt.virConnect, libvirt.virDomain]:
    conn = api.connect(guest.uri)
    dom = api.lookup(conn, guest.uuid)
    if dom is None or not dom.isActive():
        conn.close()
        raise HarnessError(f"guest {guest.name} is not running any more",
                           f"look at its console log {guest.console_log}; clean up with: vmharness vm down "
                           f"{guest.name}")
    return conn, dom


def vcpu_seconds(guest: Guest) -> list[float]:
    """The CPU time each of the guest's vCPU threads has used, in seconds, as the host's kernel counts
    it (libvirt reads each thread's runtime): the guest's own busy time counts time its vCPU waited
    (for QEMU's I/O thread, or stolen by another task), this does not."""
    conn, dom = domain(guest)
    try:
        return [float(t[2]) / 1e9 for t in dom.vcpus()[0]]
    finally:
        conn.close()


# The guest's QEMU process, from the pid file libvirt keeps for domain $1 (no newline in it): $pid, or
# an end with nothing printed. The start of each script below, one process on the guest's machine.
_QEMU_PID = r"""
{ read -r pid || [ -n "$pid" ]; } 2>/dev/null < "/run/libvirt/qemu/$1.pid" || exit 0
"""
# The guest's QEMU, in one read: the whole process's CPU time (utime and stime of /proc/PID/stat, which
# the kernel scales to its exact runtime, exited threads included; in clock ticks, CLK_TCK given), and for
# each thread its name, the nanoseconds it ran and those it waited on a runqueue for a CPU (schedstat).
# The vCPU threads are named "CPU N/KVM" or "CPU N/TCG"; the others are QEMU's own (its main loop, I/O
# threads, workers).
_THREADS = _QEMU_PID + r"""read -r stat < "/proc/$pid/stat" && echo "total ${stat##*) }"
echo "ticks $(getconf CLK_TCK)"
for t in /proc/$pid/task/*; do
  read -r name < "$t/comm" && read -r ran waited _ < "$t/schedstat" && echo "$name $ran $waited"
done 2>/dev/null
"""
_THREAD_LINE = re.compile(r"(.{1,64}) (\d{1,20}) (\d{1,20})")
_VCPU = re.compile(r"CPU (\d{1,4})/[A-Z]{1,8}")


def qemu_threads(guest: Guest) -> tuple[list[float], float | None]:
    """The seconds each vCPU thread of the guest has waited on a runqueue for a host CPU (a CPU other
    work held), in vCPU order, and the CPU seconds its QEMU has spent outside its vCPU threads (device
    emulation, I/O threads: the host's work for the guest that no vCPU's time shows). [] and None where
    they are not known: its QEMU, the kernel's schedstat or a vCPU's thread missing."""
    res = guest.machine.run(["sh", "-c", _THREADS, "sh", domain_name(guest.name)], timeout=30, check=False)
    return parse_threads(res.stdout)


def parse_threads(text: str) -> tuple[list[float], float | None]:
    """`_THREADS`'s lines: the vCPUs' waits in seconds, in vCPU order ([] unless every vCPU from 0 up is
    there once), and the process's CPU seconds less its vCPU threads' (None without the process's figure
    or with the vCPUs incomplete; a line of anything else is left out)."""
    waits: dict[int, float] = {}
    ran = 0.0
    total = ticks = None
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "total" and len(fields := rest.split()) > 12 and fields[11].isdigit() and fields[12].isdigit():
            total = int(fields[11]) + int(fields[12])
        elif word == "ticks" and rest.isdigit() and 0 < int(rest) < 1_000_000:
            ticks = int(rest)
        elif (m := _THREAD_LINE.fullmatch(line)) is not None and (v := _VCPU.fullmatch(m[1])) is not None:
            if int(v[1]) in waits:
                return [], None
            waits[int(v[1])] = int(m[3]) / 1e9
            ran += int(m[2]) / 1e9
    if set(waits) != set(range(len(waits))):
        return [], None
    others = None if total is None or ticks is None or not waits else total / ticks - ran
    return [waits[n] for n in range(len(waits))], others


# KVM's own per-vCPU statistics (its binary stats file descriptor), which QEMU passes on (QMP
# query-stats, QEMU 7.1) and libvirt with them in its bulk stats' vCPU group as vcpu.<n>.<name>.<type>
# (libvirt 8.9; virsh domstats --vcpu); "sum" is a counter's running total. Under TCG there are none.
KVM_STAT = re.compile(r"vcpu\.(\d{1,4})\.([a-z][a-z0-9_]{0,63})\.sum")
# What of them is a VM exit, by kind (exits, io_exits, mmio_exits, halt_exits, irq_exits,
# irq_window_exits, nmi_window_exits, request_irq_exits, signal_exits, ...), or work KVM does on
# entering or leaving the guest that a mitigation adds or a guest's device causes.
KVM_EXTRA = ("l1d_flush", "insn_emulation", "hypercalls")


def kvm_counters(guest: Guest) -> dict[str, int]:
    """KVM's counters of the guest's VM exits by kind, each summed over its vCPUs; {} when libvirt
    gives none (TCG, or a libvirt, QEMU or kernel too old to pass them on) or its stats call fails:
    they are a view beside the measurement, which does not fail for them (the report then says that
    none were recorded)."""
    conn, dom = domain(guest)
    try:
        got = conn.domainListGetStats([dom], libvirt.VIR_DOMAIN_STATS_VCPU)
    except libvirt.libvirtError:
        got = []
    finally:
        conn.close()
    return exit_counts(got[0][1] if got else {})


def exit_counts(stats: dict[str, Any]) -> dict[str, int]:
    """The VM exit counters of libvirt's bulk stats (`vcpu.<n>.<name>.sum`), each summed over the vCPUs."""
    out: dict[str, int] = {}
    for key, value in stats.items():
        m = KVM_STAT.fullmatch(key)
        if m is None or not (m[2] == "exits" or m[2].endswith("_exits") or m[2] in KVM_EXTRA):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[m[2]] = out.get(m[2], 0) + value
    return out


def cap_vcpus(guest: Guest, percent: int) -> None:
    """Cap each vCPU thread of the running guest to `percent` of a CPU (0: no cap), as <cputune>'s
    period and quota do at definition: the kernel's CFS bandwidth control, through libvirt's cgroups."""
    conn, dom = domain(guest)
    try:
        quota = cap_quota(percent) if percent else -1
        dom.setSchedulerParametersFlags({"vcpu_period": CAP_PERIOD_US, "vcpu_quota": quota},
                                        libvirt.VIR_DOMAIN_AFFECT_LIVE)
    except libvirt.libvirtError as exc:
        raise HarnessError(f"cannot cap {guest.name}'s vCPUs to {percent}%: {exc.get_error_message()}",
                           "libvirt needs the cpu cgroup controller for this (`cat /proc/cgroups`)") from exc
    finally:
        conn.close()


def console_tail(guest_or_log: Guest | str, machine: Machine | None = None, lines: int = 20) -> str:
    path = guest_or_log.console_log if isinstance(guest_or_log, Guest) else guest_or_log
    where = guest_or_log.machine if isinstance(guest_or_log, Guest) else machine or Machine()
    res = where.run(["tail", "-n", str(lines), path], timeout=30, check=False)
    return res.stdout.replace("\r", "") if res.ok else ""


def emulator(guest: Guest) -> str:
    """The binary the guest's QEMU process runs, as the host's kernel names it (/proc/PID/exe); "" when
    its process was not found."""
    res = guest.machine.run(["sh", "-c", _QEMU_PID + 'readlink "/proc/$pid/exe"', "sh", domain_name(guest.name)],
                            timeout=30, check=False)
    return res.stdout.strip() if res.ok else ""


# The CPUs each thread of the guest's QEMU may run on, as the kernel has them (libvirt names vCPU
# threads "CPU N/KVM" or "CPU N/TCG"). One process on the guest's machine.
_AFFINITY = _QEMU_PID + r"""
allowed() { while read -r key value; do [ "$key" = Cpus_allowed_list: ] && echo "$value $2"; done < "$1"; }
allowed "/proc/$pid/status" emulator
for t in /proc/$pid/task/*; do read -r name < "$t/comm" && allowed "$t/status" "$name"; done 2>/dev/null
"""


def affinity(guest: Guest) -> dict[str, str]:
    """Thread name -> allowed CPU list of the guest's QEMU, its main thread as "emulator" (empty: its
    process was not found)."""
    res = guest.machine.run(["sh", "-c", _AFFINITY, "sh", domain_name(guest.name)], timeout=30, check=False)
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        cpus, _, name = line.partition(" ")
        out.setdefault(name, cpus)
    return out
