"""A study's host switch that changes nothing on this host is dropped after its first host boot, as a
guest switch is after its first guest boot (experiment/runner.py): where the host boot `host-no-X`
reports the same vulnerability verdicts and the same boot-log mitigation lines as the reference's host
boot did, X is off or on alike here (the CPU is not affected, or the kernel ignores the word), so its
rounds would measure the reference again at the price of a reboot each. Its instance is recorded as
dropped, measured in no round, and the engine boots its host boot no more (engine.Engine.skip).

The comparison is with the reference's first visit, kept in the run's manifest (host_boots). Both
sides must be read whole: a visit without the kernel log's lines (a log that could not be read) is
never the same, so such a switch is measured."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vmharness.experiment.hostboots.plan import Stop
from vmharness.model import hoststudy
from vmharness.model.sections import RunConfig

COMPARED = ("vulnerabilities", "mitigation_log")


def switch_of(cfg: RunConfig, stop: Stop) -> str | None:
    """The host switch whose host boot `stop` is, or None."""
    return next((s for s in cfg.study.host_switches if hoststudy.name(s) == stop.boot), None)


def why(cfg: RunConfig, visits: Iterable[Any], stop: Stop, now: dict[str, Any]) -> str | None:
    """Why `stop`'s host switch can be dropped (`now`: the host's facts in it; `visits`: the manifest's
    host_boots so far), or None: not a host switch's boot, not its first round, no visit of the reference's
    host boot before it, or a difference in what the host reports."""
    switch = switch_of(cfg, stop)
    reference = cfg.instance[0].host_boot
    if switch is None or stop.boot == reference or stop.round != 0:
        return None  # judged at its first host boot alone, before any of its points is measured
    first = next((v for v in visits if isinstance(v, dict) and v.get("boot") == reference and not v.get("dropped")),
                 None)
    if first is None:
        return None
    if not (isinstance(now.get("vulnerabilities"), dict) and now["vulnerabilities"]
            and isinstance(now.get("mitigation_log"), list)):
        return None  # a host that reports no verdicts, or a log not read, tells nothing
    if any(now.get(key) != first.get(key) for key in COMPARED):
        return None
    where = f"the host boot {reference}" if reference else "the boot the run started in"
    return (f"the host reports the same vulnerabilities and boot-log mitigation lines as in {where}: "
            f"{switch} changes nothing on this host")
