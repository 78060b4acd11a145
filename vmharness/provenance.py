"""What a result was measured on, for the manifest: each machine's kernel and cmdline, CPU model and
microcode, CPU vulnerability mitigations as the kernel reports them, clocksource, NIC drivers and
firmware (`ethtool -i`), memory and hugepages; for the machine that runs the guests also QEMU, libvirt
and the accelerator. One shell round trip per machine; a fact a machine cannot give is left empty."""

from __future__ import annotations

from typing import Any

from vmharness.errors import HarnessError
from vmharness.machine import Machine

_FACTS = r"""
s() { printf '@%s\n' "$1"; }
s kernel; uname -r
s cmdline; cat /proc/cmdline
s cpu_model; sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1
s microcode; sed -n 's/^microcode[[:space:]]*: //p' /proc/cpuinfo | head -n 1
s cpus; getconf _NPROCESSORS_ONLN
s os; (. /etc/os-release && echo "$PRETTY_NAME")
s clocksource; cat /sys/devices/system/clocksource/clocksource0/current_clocksource
s memory; sed -n 's/^MemTotal:[[:space:]]*//p' /proc/meminfo
s hugepages; grep -E '^(HugePages_Total|HugePages_Free|Hugepagesize):' /proc/meminfo
s vulnerabilities
for f in /sys/devices/system/cpu/vulnerabilities/*; do [ -f "$f" ] && echo "${f##*/}: $(cat "$f")"; done
s nics
for d in /sys/class/net/*; do
    [ -e "$d/device" ] || continue
    n=${d##*/}
    echo "$n $(ethtool -i "$n" 2>/dev/null | tr '\n' ';')"
done
s qemu; qemu-system-x86_64 --version 2>/dev/null | head -n 1
"""


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("@") and " " not in line:
            current = out.setdefault(line[1:], [])
        elif current is not None and line.strip():
            current.append(line.rstrip())
    return out


def _pairs(lines: list[str], sep: str) -> dict[str, str]:
    out = {}
    for line in lines:
        key, found, value = line.partition(sep)
        if found:
            out[key.strip()] = value.strip()
    return out


def parse(text: str) -> dict[str, Any]:
    """The facts script's output as a dict (unit-tested on recorded output)."""
    sec = _sections(text)

    def one(name: str) -> str:
        return sec.get(name, [""])[0] if sec.get(name) else ""

    nics = {}
    for line in sec.get("nics", []):
        name, _, rest = line.partition(" ")
        nics[name] = _pairs(rest.split(";"), ":")
    return {
        "kernel": one("kernel"), "cmdline": one("cmdline"), "cpu_model": one("cpu_model"),
        "microcode": one("microcode"), "cpus": int(one("cpus")) if one("cpus").isdigit() else None,
        "os": one("os"), "clocksource": one("clocksource"), "memory": one("memory"),
        "hugepages": _pairs(sec.get("hugepages", []), ":"),
        "vulnerabilities": _pairs(sec.get("vulnerabilities", []), ":"),
        "nics": nics, "qemu": one("qemu"),
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
