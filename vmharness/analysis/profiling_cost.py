"""What the profiler cost a profiled point (`[explain] profile`, analysis/profiles.py): its throughput
against the mean of the same instance's unprofiled points at that count in the same boot (in any boot,
where that one has none: a run's boots differ by more than the profiler costs, and beside a load a
demo's profiled baseline read +112% against the mean of all four boots' points), never into the sweep's
statistics. Where a vCPU thread of any of those points waited WAIT_LIMIT percent of the time or more for
a host CPU, other work set those rates as much as the profiler did (in CI's run of 32dccfc a profiled
point beside the rig's kexec test served a sixth of its boot's plain one): the cost is given with that
wait and said not to be judged, by the positive control's rule (variants.unheld)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from vmharness.analysis.loadcurve import damaged


def of(r: dict[str, Any], rps: float, plain_points: list[dict[str, Any]], where: Path
       ) -> tuple[float | None, float | None]:
    """The profiled point `r` (serving `rps`) against `plain_points` (its instance's measurements at its
    count): its cost (None: nothing to set it beside) and the most any of their vCPU threads waited for a
    host CPU, percent (None: the host was not read)."""
    same_boot = [m for m in plain_points if m.get("iteration") == r.get("iteration")]
    plain, waits = [], waited(r, where)
    for m in same_boot or plain_points:
        try:
            plain.append(float(m["client"]["requests_per_s"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise damaged(where, "measurement", m.get("key"), exc) from exc
        waits += waited(m, where)
    mean = statistics.fmean(plain) if plain else 0.0
    return (rps / mean - 1 if mean > 0 else None), (max(waits) if waits else None)


def waited(r: dict[str, Any], where: Path) -> list[float]:
    """The shares a point's vCPU threads waited for a host CPU (percent; none where the host was not read)."""
    host = r.get("host")
    got = host.get("vcpu_wait_percent") if isinstance(host, dict) else None
    if got is None:
        return []
    try:
        if not isinstance(got, list):
            raise TypeError("its vCPUs' waits are not a list")
        out = [float(w) for w in got]
    except (TypeError, ValueError) as exc:
        raise damaged(where, str(r.get("kind")), r.get("key"), exc) from exc
    if not all(math.isfinite(w) and w >= 0 for w in out):
        raise damaged(where, str(r.get("kind")), r.get("key"), ValueError("a vCPU's wait is not a share"))
    return out
