"""What a result was measured on, for the manifest: each machine's kernel and cmdline, CPU model,
microcode and flags, the machine's DMI name, CPU vulnerability mitigations as the kernel reports
them (and its boot log's lines about them), clocksource, NIC drivers and firmware (`ethtool -i`),
memory and hugepages (in all and per NUMA node); for the machine that runs the guests also QEMU,
libvirt and the accelerator. One shell round trip per machine; a fact a machine cannot give is left empty."""

from __future__ import annotations

from typing import Any

from vmharness.cpus import parse_cpulist
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.host.inspect import kernel_log
from vmharness.host.libvirt import api
from vmharness.system import sysfs
from vmharness.system.machine import Machine

CLOCKSOURCE = f"{sysfs.CLOCKSOURCE}/current_clocksource"  # the facts' and clocksource()'s

# Few processes: on a guest under TCG every fork and exec costs a good part of a second.
_FACTS = r"""
s() { printf '@%s\n' "$1"; }
s version; read -r line < /proc/version; echo "$line"
s cmdline; read -r line < /proc/cmdline; echo "$line"
s online; read -r line < /sys/devices/system/cpu/online; echo "$line"
s clocksource; read -r line < @CLOCKSOURCE@; echo "$line"
s os; . /etc/os-release; echo "$PRETTY_NAME"
s cpuinfo; grep -m 3 -E '^(model name|microcode|flags)[[:space:]]*:' /proc/cpuinfo
s dmi; { read -r v < /sys/class/dmi/id/sys_vendor && read -r p < /sys/class/dmi/id/product_name; } 2>/dev/null \
    && echo "$v $p"
s meminfo; grep -E '^(MemTotal|HugePages_Total|HugePages_Free|Hugepagesize):' /proc/meminfo
s nodes; grep -H . /sys/devices/system/node/node*/hugepages/*/*_hugepages 2>/dev/null
s bootlog; dmesg 2>/dev/null | grep -iE '@WORDS@'
s vulnerabilities; cd /sys/devices/system/cpu/vulnerabilities 2>/dev/null && grep -H . * && cd /
for d in /sys/class/net/*; do
    [ -e "$d/device" ] || continue
    s "nic ${d##*/}"; ethtool -i "${d##*/}" 2>/dev/null
done
s qemu; command -v qemu-system-x86_64 >/dev/null && qemu-system-x86_64 --version
""".replace("@WORDS@", kernel_log.WORDS).replace("@CLOCKSOURCE@", CLOCKSOURCE)


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("@"):
            current = out.setdefault(line[1:], [])
        elif current is not None and line.strip():
            current.append(line.rstrip())
    return out


def _pairs(lines: list[str], sep: str = ":") -> dict[str, str]:
    out = {}
    for line in lines:
        key, found, value = line.partition(sep)
        if found:
            out[key.strip()] = value.strip()
    return out


def _cpu_count(online: str) -> int | None:
    """`0-3,8` -> 5; None when the list is missing or garbled."""
    try:
        return len(parse_cpulist(online)) or None
    except HarnessError:
        return None


def parse(text: str) -> dict[str, Any]:
    """The facts script's output as a dict (unit-tested on recorded output)."""
    sec = _sections(text)

    def one(name: str) -> str:
        return sec[name][0] if sec.get(name) else ""

    version = one("version").split()
    cpuinfo, meminfo = _pairs(sec.get("cpuinfo", [])), _pairs(sec.get("meminfo", []))
    nodes: dict[str, dict[str, dict[str, int]]] = {}
    for path, value in _pairs(sec.get("nodes", [])).items():  # .../node0/hugepages/hugepages-2048kB/nr_hugepages
        parts = path.split("/")
        if len(parts) > 3 and is_digits(value):
            size = parts[-2].removeprefix("hugepages-")
            nodes.setdefault(parts[-4], {}).setdefault(size, {})[parts[-1].removesuffix("_hugepages")] = int(value)
    return {
        "kernel": version[2] if len(version) > 2 else "", "version": one("version"), "cmdline": one("cmdline"),
        "cpu_model": cpuinfo.get("model name", ""), "microcode": cpuinfo.get("microcode", ""),
        "cpu_flags": sorted(cpuinfo.get("flags", "").split()), "machine": one("dmi"),
        "cpus": _cpu_count(one("online")), "os": one("os"), "clocksource": one("clocksource"),
        "memory": meminfo.pop("MemTotal", ""), "hugepages": meminfo, "hugepages_by_node": nodes,
        "vulnerabilities": _pairs(sec.get("vulnerabilities", [])),
        "nics": {name[4:]: _pairs(lines) for name, lines in sec.items() if name.startswith("nic ")},
        "qemu": one("qemu"),
        "mitigation_log": kernel_log.mitigation_lines(sec.get("bootlog", [])),
    }


def facts(machine: Machine) -> dict[str, Any]:
    """The machine's facts; {"error": ...} if it cannot be asked."""
    try:
        res = machine.run(["sh", "-c", _FACTS], timeout=60, check=False)
    except HarnessError as exc:
        return {"error": exc.message}
    return parse(res.stdout)


def libvirt_versions(uri: str) -> dict[str, str]:
    """libvirt's own version and the hypervisor's (QEMU) as the daemon at `uri` reports them."""
    def dotted(n: int) -> str:
        return f"{n // 1000000}.{n // 1000 % 1000}.{n % 1000}"

    conn = api.connect(uri)
    try:
        return {"libvirt": dotted(conn.getLibVersion()), "hypervisor": dotted(conn.getVersion()), "uri": uri}
    finally:
        conn.close()


def clocksource(machine: Machine) -> str | None:
    """The clocksource the machine's kernel keeps time with now; None where it cannot be read. A kernel
    that judges its TSC unstable (its watchdog saw it drift from another clock: a guest under TCG on a
    loaded host) moves to a clock the vDSO cannot read, and each time-of-day call becomes a system call."""
    try:
        res = machine.run(["cat", CLOCKSOURCE], timeout=30, check=False)
    except HarnessError:
        return None
    name = res.stdout.strip()
    return name if res.ok and name else None


MITIGATION_FACTS = ("vulnerabilities", "mitigation_log", "cpu_flags")  # what a guest says of its mitigations


def same_mitigations(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two guests' facts (parse's) report the same mitigations: vulnerability files, the boot log's
    mitigation lines and CPU flags, each present in both."""
    return all(k in a and k in b and a[k] == b[k] for k in MITIGATION_FACTS)
