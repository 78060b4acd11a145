"""One JSON form for a change with its interval, used by every section of the JSON report that gives
one (throughput and latency at the peak, kernel events, system calls): every figure, a limit that is
not finite as null."""

from __future__ import annotations

import math
from typing import Any

from vmharness.stats import Change


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def change_json(c: Change | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"change": finite(c.change), "low": c.low, "high": finite(c.high), "significant": c.significant,
            "detectable": finite(c.detectable), "n": c.n, "level": c.level, "method": c.method}
