"""Student's t on a handful of values, as numpy and scipy compute it, at a fraction of the cost: the
statistics of a run (vmharness.stats) take means, standard errors and t quantiles of three to ten
values, thousands of times over in a report and millions in the coverage tests, where numpy's layers
around two sums cost five times the sums (tests/unit/test_stats.py holds every result to numpy's and
scipy's own, bit for bit where numpy's steps are repeated here)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np


@functools.cache
def special() -> Any:
    """scipy.special, imported on its first use (about 200 ms of CPU, where scipy.stats takes 500):
    every command that reads a configuration reaches the statistics through the preflight, and most
    of them, error paths included, never compute an interval. Its Student-t and F quantiles are the
    very functions scipy.stats' t.ppf and f.ppf call. Kept once imported: an import statement run
    again costs the import machinery's lookup at every call."""
    from scipy import special as module

    return module


def mean(a: np.ndarray) -> float:
    """numpy's `mean`: its sum over n, the same bits."""
    return float(a.sum() / len(a))


def sem(values: Sequence[float] | np.ndarray) -> float:
    """The standard error of the mean (n - 1 in the variance), as scipy.stats.sem computes it: numpy's
    own steps for `std(ddof=1)`, its sums in its order, so the same bits. NaN for fewer than two."""
    a = np.asarray(values, dtype=float)
    n = len(a)
    if n < 2:
        return math.nan  # as numpy's, without its warning
    d = a - a.sum() / n
    return math.sqrt(float((d * d).sum()) / (n - 1)) / math.sqrt(n)


def quantile(level: float, df: float) -> float:
    """The two-sided Student-t quantile for `level`."""
    return float(special().stdtrit(df, 0.5 + level / 2.0))
