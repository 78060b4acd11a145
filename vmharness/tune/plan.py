"""A tuning plan: for each knob on one target the value now, the value wanted and why (a change, or
kept where it is already so), or the reason it is skipped on this machine. tune/knobs.py makes a plan,
tune/apply.py carries it out and reverts it; `tune plan` and a run's manifest show it as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vmharness.cpus import parse_mask


@dataclass(frozen=True)
class Change:
    knob: str
    path: str  # a file; or `ethtool:IFACE:SETTING`; or `service:NAME`
    before: str
    after: str
    why: str

    def to_json(self) -> dict[str, str]:
        return {"knob": self.knob, "path": self.path, "before": self.before, "after": self.after, "why": self.why}


@dataclass(frozen=True)
class Skip:
    knob: str
    why: str


@dataclass
class Plan:
    target: str
    changes: list[Change] = field(default_factory=list)
    kept: list[Change] = field(default_factory=list)  # already at the wanted value
    skips: list[Skip] = field(default_factory=list)

    def want(self, knob: str, path: str, before: str | None, after: str, why: str) -> None:
        if before is not None:
            before = " ".join(before.split())  # one line, single spaces (port ranges come tab-separated)
        if before is None:
            self.skips.append(Skip(knob, f"{path} does not exist here"))
        elif same(before, after, knob):
            self.kept.append(Change(knob, path, before, after, why))
        else:
            self.changes.append(Change(knob, path, before, after, why))

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "changes": [c.to_json() for c in self.changes],
                "kept": [c.to_json() for c in self.kept], "skipped": [{"knob": s.knob, "why": s.why}
                                                                     for s in self.skips]}


MASK_KNOBS = ("rps", "irq_affinity")


def same(a: str, b: str, knob: str = "") -> bool:
    """Equal as the kernel means them: masks by their CPUs, numbers and lists by their words."""
    if knob in MASK_KNOBS:
        return parse_mask(a) == parse_mask(b)
    return a.split() == b.split()
