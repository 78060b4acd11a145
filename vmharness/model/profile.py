"""Tuning profiles: `none` (measure the defaults), `seeds` (the source documents' knobs, the default
for `run`), or a TOML file that starts from one of them (`base = "seeds"`) and overrides knobs."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vmharness.errors import HarnessError
from vmharness.model import schema, tomlfile

Keep = Literal["keep"]
Base = Literal["none", "seeds"]
SEED_SYSCTLS: dict[str, int | str] = {
    "net.core.somaxconn": 65535,
    "net.ipv4.tcp_max_syn_backlog": 262144,
    "net.core.netdev_max_backlog": 262144,
    "net.ipv4.ip_local_port_range": "1024 65000",
    "net.ipv4.tcp_tw_reuse": 1,
    "fs.file-max": 1048576,
}
_SYSCTL = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


def check_sysctl(name: str, where: str) -> str:
    """A sysctl's dotted name as `sysctl -a` prints it: it becomes a path under /proc/sys."""
    if not _SYSCTL.fullmatch(name) or len(name) > 200:
        raise HarnessError(f"{where}: {name[:80]!r} is not a sysctl name", "write it as in sysctl -a")
    return name


@dataclass(frozen=True)
class Profile:
    name: str
    irqbalance: Literal["stop", "keep"] = "keep"
    irq_affinity: Literal["spread", "keep"] = "keep"
    rps: Literal["node-except-irq", "node", "all", "off", "keep"] = "keep"
    rfs: int | None = schema.bounded(None, 0, 1 << 30)  # rps_sock_flow_entries (shared out per queue); None: keep
    coalescing: Literal["adaptive", "keep"] = "keep"
    channels: int = schema.bounded(0, 0, 4096)  # ethtool -L combined; 0: keep
    sysctl: dict[str, int | str] = schema.checked(check_sysctl, default_factory=dict)  # noqa: RUF009 - a field()
    clocksource: Literal["tsc", "hpet", "acpi_pm", "kvm-clock", "keep"] = "keep"
    governor: Literal["performance", "powersave", "schedutil", "ondemand", "keep"] = "keep"
    thp: Literal["never", "madvise", "always", "keep"] = "keep"
    ksm: Literal["off", "keep"] = "keep"
    # `run` with a NIC passed through: vfio-pci's host interrupts of it on its node's CPUs that hold no vCPU
    vfio_irqs: Literal["off-vcpus", "keep"] = "keep"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


BUILTIN = {
    "none": Profile("none"),
    "seeds": Profile("seeds", irqbalance="stop", irq_affinity="spread", rps="node-except-irq", rfs=32768,
                     coalescing="adaptive", sysctl=dict(SEED_SYSCTLS), clocksource="tsc", governor="performance",
                     thp="never", ksm="off", vfio_irqs="off-vcpus"),
}


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the system, say
        return False


def load(name_or_path: str) -> Profile:
    """A built-in profile by name, or a profile file: its knobs on top of its `base`."""
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    path = Path(name_or_path)
    missing = HarnessError(f"no profile {name_or_path[:200]!r}", "use none, seeds, or the path of a TOML file")
    if not _is_file(path):
        raise missing
    data = tomlfile.read(path, missing)
    where = f"{path}:"
    base = BUILTIN[schema.value(f"{where} base", Base, data.pop("base", "none"))]
    if "name" in data:  # the file's own name is the profile's
        raise HarnessError(f"unknown setting {where} name", "a profile is named by its file")
    mine = schema.table(where, Profile, {"name": path.stem, **data})
    changes = {k: getattr(mine, k) for k in data}
    if "sysctl" in changes:
        changes["sysctl"] = {**base.sysctl, **changes["sysctl"]}
    if changes.get("rfs") == 0:
        changes["rfs"] = None
    return dataclasses.replace(base, name=path.stem, **changes)
