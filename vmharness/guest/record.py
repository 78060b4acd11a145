"""What the harness keeps about a guest it started (`Guest`): enough to find it again from another
command. Kept as NAME.json in /run/vmharness/vms on the machine running the harness; its name rules
(the domain vmh-NAME, a tap of 15 characters at most) are checked here, where every name is made."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.system.machine import Machine, for_uri
from vmharness.system.root import HostRoot

DOMAIN_PREFIX = "vmh-"
STATE = "/run/vmharness/vms"  # name.json per running guest, on the machine running the harness


@dataclass(frozen=True)
class Guest:
    """What the harness keeps about a running guest; enough to find it again from another command."""

    name: str
    uri: str
    uuid: str
    overlay: str
    console_log: str
    kvm: bool
    seqs: tuple[int, ...]  # its journal records
    link: dict[str, str] | None = None  # host and guest addresses of the management link
    boot_seconds: float = 0.0

    @property
    def machine(self) -> Machine:
        return for_uri(self.uri)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_name(name: str) -> None:
    """A guest's name makes its domain (vmh-NAME), its tap (15 characters at most) and file names."""
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,10}", name):
        raise HarnessError(f"guest name {name!r} (--name) is not allowed",
                           "use 1 to 11 lower-case letters, digits or dashes, starting with a letter")


def domain_name(name: str) -> str:
    return DOMAIN_PREFIX + name


def _state_file(root: HostRoot, name: str) -> Path:
    return root.path(f"{STATE}/{name}.json")


def load(root: HostRoot, name: str) -> Guest:
    check_name(name)
    path = _state_file(root, name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise HarnessError(f"no guest named {name} is up", "start one with: vmharness vm up --name "
                           f"{name}") from exc
    except (ValueError, RecursionError, OSError) as exc:
        raise HarnessError(f"{path} is damaged: {exc}", "remove it once the guest is gone (virsh list --all)") from exc
    data["seqs"] = tuple(data["seqs"])
    return Guest(**data)


def save(root: HostRoot, guest: Guest) -> None:
    root.mkdir(STATE, mode=0o700)
    root.writable(f"{STATE}/{guest.name}.json").write_text(json.dumps(guest.to_json(), indent=2, sort_keys=True)
                                                           + "\n")


def forget(root: HostRoot, name: str, dom_uuid: str | None = None) -> None:
    """Drop the note `up` keeps about a guest (only if it is about that domain, when given)."""
    note = f"{STATE}/{name}.json"
    text = root.read_optional(note)
    if text is not None and (dom_uuid is None or f'"{dom_uuid}"' in text):
        root.remove(note)


def new_uuid() -> str:
    return str(uuid.uuid4())
