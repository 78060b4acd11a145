"""A run's progress across host boots, on persistent storage: /var/lib/vmharness/hostboots/state.json
(a kexec'd kernel starts with an empty /run, where the journal lives). It says which stop of the plan
(plan.py) comes next and what the host is doing about it, so that a process killed at any step, or a
host that came back from a switch, resumes where it was:

- `ready`: the host is in the host boot of stop `next` (checked on arrival: its boot id is `boot_id`);
  its instances are measured next. With `next` past the last stop: the host is home, the run is done.
- `switch`: stop `next` needs a host boot of its own (or home, past the last stop); nothing is taken yet.
- `switching`: the kexec to `expected` was asked from the boot `boot_before`; on arrival it is checked.
- `stopped`: the run stopped for `reason` (a host that kept coming back in another boot).

Written whole, fsynced and renamed over the old one (system/owned.py), in a folder the harness made and
marked as its own; read back with every field checked, a damaged file refused with its name."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from vmharness import userfile
from vmharness.errors import HarnessError
from vmharness.system import owned

FOLDER = "var/lib/vmharness/hostboots"  # under the host root
NAME = "state.json"
OWNER = "vmharness host boots"
MAX_STATE = 4 << 20  # bytes: a few KiB of facts per host boot visited
Phase = Literal["ready", "switch", "switching", "stopped"]
PHASES = ("ready", "switch", "switching", "stopped")


@dataclass
class State:
    run: str  # the run folder it belongs to
    next: int = 0  # the stop of the plan measured (ready) or switched to (switch, switching) next
    phase: Phase = "switch"
    expected: str = ""  # the host boot a switch goes to ("" : the run's own, also home)
    boot_before: str = ""  # the boot id the switch was asked from
    boot_id: str = ""  # the boot id of the host boot the run is in (ready)
    redone: int = 0  # switches redone for stop `next`
    reason: str = ""  # why it stopped
    targets: dict[str, Any] = field(default_factory=dict)  # host boot -> what it loads (target.Target.to_json)
    visits: dict[str, Any] = field(default_factory=dict)  # host boot -> its facts at its first visit
    arrivals: list[dict[str, Any]] = field(default_factory=list)  # each arrival: stop, boot, problems

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True, indent=1) + "\n").encode()


_TYPES = {"run": str, "next": int, "phase": str, "expected": str, "boot_before": str, "boot_id": str,
          "redone": int, "reason": str, "targets": dict, "visits": dict, "arrivals": list}


def parse(data: bytes, shown: str) -> State:
    """A state file's bytes, every field checked; a damaged one is refused, never guessed at."""
    def damaged(what: str) -> HarnessError:
        return HarnessError(f"{shown} is damaged: {what}", "vmharness run --resume cannot tell where the host "
                            "boots were; host-restore gives the host back, then start the run again")
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        raise damaged("not JSON") from None
    if not isinstance(raw, dict) or set(raw) != set(_TYPES):
        raise damaged("not the fields of a state")
    for k, kind in _TYPES.items():
        if type(raw[k]) is not kind:
            raise damaged(f"{k} is not {kind.__name__}")
    if raw["phase"] not in PHASES or raw["next"] < 0 or raw["redone"] < 0:
        raise damaged(f"phase {str(raw['phase'])[:20]!r}, next {raw['next']}")
    return State(**raw)


class Store:
    """The state file of the host's run, in its owned folder under `base` (the host root's path)."""

    def __init__(self, base: Path) -> None:
        self.path = base / FOLDER

    def _folder(self) -> owned.Folder:
        return owned.claim(self.path, OWNER, str(self.path), hint="it holds a run's host boots: "
                           "vmharness host-restore, or remove it once no run uses it")

    def load(self) -> State | None:
        if not (self.path / NAME).exists() and not (self.path / NAME).is_symlink():
            return None
        owned.verify(self.path, OWNER, str(self.path))
        try:
            data = userfile.read_inside(self.path, NAME, MAX_STATE)
        except OSError as exc:
            raise HarnessError(f"{self.path / NAME}: cannot read it ({exc.strerror})", "run as root") from None
        return parse(data, str(self.path / NAME))

    def save(self, state: State) -> None:
        self._folder().write(NAME, state.to_json())

    def remove(self) -> None:
        (self.path / NAME).unlink(missing_ok=True)
