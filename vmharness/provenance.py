"""What a result was measured on, for the manifest: each machine's kernel and cmdline, CPU model and
microcode, CPU vulnerability mitigations as the kernel reports them, clocksource, NIC drivers and
firmware (`ethtool -i`), memory and hugepages; for the machine that runs the guests also QEMU, libvirt
and the accelerator. One shell round trip per machine; a fact a machine cannot give is left empty."""

from __future__ import annotations

from typing import Any

from vmharness.errors import HarnessError
from vmharness.machine import Machine

# Few processes: on a guest under TCG every fork and exec costs a good part of a second.
_FACTS = r"""
s() { printf '@%s\n' "$1"; }
s version; read -r line < /proc/version; echo "$line"
s cmdline; read -r line < /proc/cmdline; echo "$line"
s online; read -r line < /sys/devices/system/cpu/online; echo "$line"
s clocksource; read -r line < /sys/devices/system/clocksource/clocksource0/current_clocksource; echo "$line"
s os; . /etc/os-release; echo "$PRETTY_NAME"
s cpuinfo; grep -m 2 -E '^(model name|microcode)[[:space:]]*:' /proc/cpuinfo
s meminfo; grep -E '^(MemTotal|HugePages_Total|HugePages_Free|Hugepagesize):' /proc/meminfo
s vulnerabilities; cd /sys/devices/system/cpu/vulnerabilities 2>/dev/null && grep -H . * && cd /
for d in /sys/class/net/*; do
    [ -e "$d/device" ] || continue
    s "nic ${d##*/}"; ethtool -i "${d##*/}" 2>/dev/null
done
s qemu; command -v qemu-system-x86_64 >/dev/null && qemu-system-x86_64 --version
"""


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
    """`0-3,8` -> 5."""
    try:
        return sum(int(b) - int(a) + 1 for a, _, b in (p.partition("-") if "-" in p else (p, "-", p)
                                                       for p in online.split(",")))
    except ValueError:
        return None


def parse(text: str) -> dict[str, Any]:
    """The facts script's output as a dict (unit-tested on recorded output)."""
    sec = _sections(text)

    def one(name: str) -> str:
        return sec[name][0] if sec.get(name) else ""

    version = one("version").split()
    cpuinfo, meminfo = _pairs(sec.get("cpuinfo", [])), _pairs(sec.get("meminfo", []))
    return {
        "kernel": version[2] if len(version) > 2 else "", "version": one("version"), "cmdline": one("cmdline"),
        "cpu_model": cpuinfo.get("model name", ""), "microcode": cpuinfo.get("microcode", ""),
        "cpus": _cpu_count(one("online")), "os": one("os"), "clocksource": one("clocksource"),
        "memory": meminfo.pop("MemTotal", ""), "hugepages": meminfo,
        "vulnerabilities": _pairs(sec.get("vulnerabilities", [])),
        "nics": {name[4:]: _pairs(lines) for name, lines in sec.items() if name.startswith("nic ")},
        "qemu": one("qemu"),
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
    from vmharness.host import libvirt_conn

    def dotted(n: int) -> str:
        return f"{n // 1000000}.{n // 1000 % 1000}.{n % 1000}"

    conn = libvirt_conn.connect(uri)
    try:
        return {"libvirt": dotted(conn.getLibVersion()), "hypervisor": dotted(conn.getVersion()), "uri": uri}
    finally:
        conn.close()
