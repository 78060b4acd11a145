"""The host's side of every result: what decides what a guest's mitigations cost and that a run cannot
change (the host kernel's cmdline, its vulnerability verdicts, the microcode, SMT) or should not
change unseen (every KVM module parameter), with the boot it was read on.

A run records this at its start and its end (experiment/hoststate.py); `report` warns of a change
during the run and `compare` shows two runs' differences first (analysis/hostdiff.py). Read through
HostRoot, so a host snapshot answers as the live host does; a fact the host cannot give is null.
"""

from __future__ import annotations

import re
from typing import Any

from vmharness.errors import HarnessError
from vmharness.system import sysfs
from vmharness.system.root import LARGE_READ, HostRoot

BOOT_ID = "/proc/sys/kernel/random/boot_id"
CMDLINE = "/proc/cmdline"
CPUINFO = "/proc/cpuinfo"
MICROCODE = f"{sysfs.CPU}/cpu0/microcode/version"
VULNERABILITIES = sysfs.VULNERABILITIES
SMT = f"{sysfs.CPU}/smt"
MODULES = "/sys/module"
MACHINE_ID = "/etc/machine-id"  # the installation's identity: another machine, not another boot of it
HOSTNAME = "/proc/sys/kernel/hostname"
_KVM_MODULE = re.compile(r"kvm(_[a-z0-9]+)?\Z")  # kvm, kvm_intel, kvm_amd, kvm_pvm...
KEYS = ("boot_id", "cmdline", "microcode", "smt", "vulnerabilities", "kvm", "machine_id", "hostname", "cpu_model")
IDENTITY = ("machine_id", "hostname", "cpu_model")  # which machine (a state recorded before them has none)


def _read(root: HostRoot, path: str, limit: int | None = None) -> str | None:
    """The file's text, or None where the host cannot give it (absent, refused, not a regular file)."""
    try:
        return root.read_optional(path) if limit is None else root.read_optional(path, limit=limit)
    except HarnessError:
        return None


def _listdir(root: HostRoot, path: str) -> list[str]:
    if not root.is_dir(path):
        return []
    try:
        return sorted(root.listdir(path))
    except HarnessError:
        return []


def _cpuinfo(root: HostRoot, field: str) -> str | None:
    """The first CPU's `field` in /proc/cpuinfo (x86 names), None where it has none."""
    for line in (_read(root, CPUINFO, LARGE_READ) or "").splitlines():
        key, found, value = line.partition(":")
        if found and key.strip() == field:
            return value.strip()
    return None


def microcode(root: HostRoot) -> str | None:
    """The first CPU's microcode revision: /proc/cpuinfo's field (x86), else cpu0's microcode/version."""
    return _cpuinfo(root, "microcode") or _read(root, MICROCODE)


def kvm_parameters(root: HostRoot) -> dict[str, str | None]:
    """Every parameter of every loaded KVM module, `module.parameter` -> its value (None: unreadable)."""
    out: dict[str, str | None] = {}
    for module in _listdir(root, MODULES):
        if _KVM_MODULE.match(module):
            for param in _listdir(root, f"{MODULES}/{module}/parameters"):
                out[f"{module}.{param}"] = _read(root, f"{MODULES}/{module}/parameters/{param}")
    return out


def read(root: HostRoot) -> dict[str, Any]:
    """The host's state now, for the manifest."""
    return {
        "boot_id": _read(root, BOOT_ID), "cmdline": _read(root, CMDLINE), "microcode": microcode(root),
        "smt": {"control": _read(root, f"{SMT}/control"), "active": _read(root, f"{SMT}/active")},
        "vulnerabilities": {name: _read(root, f"{VULNERABILITIES}/{name}")
                            for name in _listdir(root, VULNERABILITIES)},
        "kvm": kvm_parameters(root),
        "machine_id": _strip(_read(root, MACHINE_ID)), "hostname": _strip(_read(root, HOSTNAME)),
        "cpu_model": _cpuinfo(root, "model name"),
    }


def _strip(text: str | None) -> str | None:
    return text.strip() or None if text is not None else None


def flat(state: dict[str, Any]) -> dict[str, str | None]:
    """One value per fact, named as the report says it: `cmdline`, `smt.control`, `vulnerability mds`,
    `kvm.nx_huge_pages` (the boot left out: it is said on its own)."""
    out: dict[str, str | None] = {"cmdline": state.get("cmdline"), "microcode": state.get("microcode")}
    out |= {f"smt.{k}": v for k, v in sorted(state["smt"].items())}
    out |= {f"vulnerability {k}": v for k, v in sorted(state["vulnerabilities"].items())}
    out |= dict(sorted(state["kvm"].items()))
    return out


def other_machine(before: dict[str, Any], after: dict[str, Any], keys: tuple[str, ...] = IDENTITY) -> str | None:
    """What tells two states' machines apart (machine-id, hostname, CPU model where both name it), or None:
    another boot of one machine is not another machine."""
    differ = [f"{k} {str(before[k])[:80]!r} -> {str(after[k])[:80]!r}" for k in keys
              if before.get(k) and after.get(k) and before[k] != after[k]]
    return "; ".join(differ) or None


def differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, str]:
    """What differs from `before` to `after`: fact -> `name: old -> new` ('-' where absent), the machine
    (`machine`: other_machine) and the boot first."""
    a, b = flat(before), flat(after)

    def show(v: str | None) -> str:
        return "-" if v is None else repr(v[:200])

    out = {"machine": machine} if (machine := other_machine(before, after)) else {}
    out |= {} if before.get("boot_id") == after.get("boot_id") else {
        "boot": f"boot {before.get('boot_id') or '?'} -> {after.get('boot_id') or '?'}"}
    return out | {k: f"{k}: {show(a.get(k))} -> {show(b.get(k))}" for k in dict.fromkeys([*a, *b])
                  if a.get(k) != b.get(k)}
