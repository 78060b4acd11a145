"""Tuning profiles: `none` (measure the defaults), `seeds` (the source documents' knobs, the default
for `run`), or a TOML file that starts from one of them (`base = "seeds"`) and overrides knobs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness import tomlfile
from vmharness.errors import HarnessError

CHOICES: dict[str, tuple[str, ...]] = {
    "irqbalance": ("stop", "keep"),
    "irq_affinity": ("spread", "keep"),
    "rps": ("node-except-irq", "node", "all", "off", "keep"),
    "coalescing": ("adaptive", "keep"),
    "clocksource": ("tsc", "hpet", "acpi_pm", "kvm-clock", "keep"),
    "governor": ("performance", "powersave", "schedutil", "ondemand", "keep"),
    "thp": ("never", "madvise", "always", "keep"),
    "ksm": ("off", "keep"),
}
SEED_SYSCTLS: dict[str, int | str] = {
    "net.core.somaxconn": 65535,
    "net.ipv4.tcp_max_syn_backlog": 262144,
    "net.core.netdev_max_backlog": 262144,
    "net.ipv4.ip_local_port_range": "1024 65000",
    "net.ipv4.tcp_tw_reuse": 1,
    "fs.file-max": 1048576,
}


@dataclass(frozen=True)
class Profile:
    name: str
    irqbalance: str = "keep"
    irq_affinity: str = "keep"
    rps: str = "keep"
    rfs: int | None = None  # rps_sock_flow_entries (shared out per queue); None: keep
    coalescing: str = "keep"
    channels: int = 0  # ethtool -L combined; 0: keep
    sysctl: dict[str, int | str] = field(default_factory=dict)
    clocksource: str = "keep"
    governor: str = "keep"
    thp: str = "keep"
    ksm: str = "keep"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


BUILTIN = {
    "none": Profile("none"),
    "seeds": Profile("seeds", irqbalance="stop", irq_affinity="spread", rps="node-except-irq", rfs=32768,
                     coalescing="adaptive", sysctl=dict(SEED_SYSCTLS), clocksource="tsc", governor="performance",
                     thp="never", ksm="off"),
}


def _check(where: str, key: str, value: Any) -> Any:
    if key in CHOICES:
        if value not in CHOICES[key]:
            raise HarnessError(f"{where}: {key} = {value!r} is not one of {', '.join(CHOICES[key])}",
                               "see docs/tuning.md for every knob")
        return value
    if key in ("rfs", "channels"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (key == "rfs" and value > 1 << 30):
            raise HarnessError(f"{where}: {key} must be a whole number of at least 0, not {value!r}",
                               "see docs/tuning.md")
        return value
    if key == "sysctl":
        if not isinstance(value, dict):
            raise HarnessError(f"{where}: sysctl must be a table of name = value", 'e.g. "net.core.somaxconn" = 4096')
        for name, v in value.items():
            if not all(part.replace("_", "").replace("-", "").isalnum() for part in name.split(".")):
                raise HarnessError(f"{where}: {name!r} is not a sysctl name", "write it as in sysctl -a")
            if isinstance(v, bool) or not isinstance(v, int | str):
                raise HarnessError(f"{where}: sysctl {name} must be a number or a string",
                                   'e.g. 65535 or "1024 65000"')
        return value
    known = ", ".join(["base", *CHOICES, "rfs", "channels", "sysctl"])
    raise HarnessError(f"{where}: unknown knob {key!r}", f"known knobs: {known}")


def load(name_or_path: str) -> Profile:
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    path = Path(name_or_path)
    data = tomlfile.read(path, HarnessError(f"no profile {name_or_path!r}",
                                            "use none, seeds, or the path of a TOML file"))
    base = BUILTIN.get(data.pop("base", "none"))
    if base is None:
        raise HarnessError(f"{path}: base must be none or seeds", 'e.g. base = "seeds"')
    changes = {key: _check(str(path), key, value) for key, value in data.items()}
    if "sysctl" in changes:
        changes["sysctl"] = {**base.sysctl, **changes["sysctl"]}
    if changes.get("rfs") == 0:
        changes["rfs"] = None
    return dataclasses.replace(base, name=path.stem, **changes)
