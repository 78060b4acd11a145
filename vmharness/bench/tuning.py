"""The tuning a run asks for (`[tuning]` in its configuration): applied on each machine before the
sweep, written into the run knob by knob (changed, already set, skipped, with reasons), and
reverted after it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vmharness.model import profile
from vmharness.model.sections import BenchConfig
from vmharness.progress import Say
from vmharness.system.root import HostRoot
from vmharness.tune import access, apply, knobs


@dataclass(frozen=True)
class Place:
    """A machine to tune: its name in the report, how to reach it, the NICs that carry the benchmark
    (None: every interface backed by a device; empty: none), and whether it runs the guests."""

    name: str
    target: access.Target
    ifaces: tuple[str, ...] | None = None
    is_host: bool = False


def _target(host: str, root: HostRoot) -> access.Target:
    return access.HostTarget(root) if host == "local" else access.ssh_target(host)


def places(cfg: BenchConfig, root: HostRoot) -> list[Place]:
    """bench's machines: the server and every client, each once."""
    machines = {cfg.server.host: cfg.tuning.server_iface}
    for c in cfg.client:
        machines.setdefault(c.host, cfg.tuning.client_iface)
    return [Place(host, _target(host, root), ifaces or None) for host, ifaces in machines.items()]


@contextmanager
def tuned(profile_name: str, where: list[Place], root: HostRoot, say: Say,
          owner: str) -> Iterator[list[dict[str, Any]]]:
    """Yields what goes into the run's records; reverts on the way out, whatever happened. The
    journal records name `owner` (the run's)."""
    report: list[dict[str, Any]] = []
    made: list[dict[str, Any]] = []
    if profile_name == "none":
        yield report
        return
    prof = profile.load(profile_name)
    try:
        for place in where:
            t = place.target
            found = place.ifaces if place.ifaces is not None else tuple(
                n for n in t.listdir("/sys/class/net") if t.read(f"/sys/class/net/{n}/device/uevent") is not None)
            plan = knobs.make(t, prof, found, is_host=place.is_host)
            made += apply.apply(root, t, plan, say, owner)
            report.append({"machine": place.name, "profile": prof.name, **plan.to_json()})
            say(f"tuned {place.name}: {len(plan.changes)} changes, {len(plan.kept)} already set, "
                f"{len(plan.skips)} skipped")
        yield report
    finally:
        problems = apply.undo(root, made, say)
        for p in problems:
            say(f"NOT REVERTED: {p}")
