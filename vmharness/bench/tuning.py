"""The tuning a bench run asks for (`[tuning]` in its configuration): applied on the server and
every client before the sweep, written into the manifest knob by knob (changed, already set,
skipped, with reasons), and reverted after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vmharness.config import BenchConfig
from vmharness.host.root import HostRoot
from vmharness.tune import access, apply, knobs, profile

Say = Callable[[str], None]


def _target(host: str, root: HostRoot) -> access.Target:
    return access.HostTarget(root) if host == "local" else access.ssh_target(host)


@contextmanager
def tuned(cfg: BenchConfig, root: HostRoot, say: Say) -> Iterator[list[dict[str, Any]]]:
    """Yields what went into the manifest; reverts on the way out, whatever happened."""
    report: list[dict[str, Any]] = []
    made: list[dict[str, Any]] = []
    if cfg.tuning.profile == "none":
        yield report
        return
    prof = profile.load(cfg.tuning.profile)
    machines = {cfg.server.host: cfg.tuning.server_iface}
    for c in cfg.client:
        machines.setdefault(c.host, cfg.tuning.client_iface)
    try:
        for host, ifaces in machines.items():
            t = _target(host, root)
            found = ifaces or tuple(n for n in t.listdir("/sys/class/net")
                                    if t.read(f"/sys/class/net/{n}/device/uevent") is not None)
            plan = knobs.make(t, prof, found, is_host=False)
            made += apply.apply(root, t, plan, say)
            report.append({"machine": host, "profile": prof.name, **plan.to_json()})
            say(f"tuned {host}: {len(plan.changes)} changes, {len(plan.kept)} already set, "
                f"{len(plan.skips)} skipped")
        yield report
    finally:
        problems = apply.undo(root, made, say)
        for p in problems:
            say(f"NOT REVERTED: {p}")
