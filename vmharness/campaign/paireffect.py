"""Whether the node pair a run had moves its throughput. For each cell (and instance) whose repetitions
ran on more than one pair: each pair's mean throughput and its change against the baseline cell on the
same pair (so that a pair's own speed cancels where the baseline ran there too), and a one-way analysis
of variance of the cell's runs by pair, on logs (the noise is multiplicative):

- F, the spread of the pair means against the spread within pairs, and its p-value (scipy's F
  distribution: as scipy.stats.f_oneway computes it); `flagged` by Holm's step-down over every cell
  the campaign tests (`tests` of them) at 1 - level: one test per cell at 5% would flag a pair effect
  in a third of campaigns of eight cells with none;
- the pair effect's size: the standard deviation between pairs (random-effects estimate, on logs: about
  a relative change), and the share of the variance that lies between pairs with its interval, exact
  under normal noise for equal runs per pair: MS_between / MS_within follows (1 + n theta) F(k - 1, N - k),
  theta = between^2 / within^2 (with unequal runs per pair n is Snedecor's n0, and it is approximate).

A cell run once on each pair, or on one pair, has no such estimate: the report says so."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vmharness.analysis.attribution import holm

LEVEL = 0.95


@dataclass(frozen=True)
class OneWay:
    pairs: int
    runs: int
    f: float
    df: tuple[int, int]  # between pairs, within pairs
    p: float
    between: float  # standard deviation of log throughput between pairs
    within: float  # and within a pair
    share: float  # between^2 / (between^2 + within^2), with its interval
    share_low: float
    share_high: float
    level: float


def one_way(groups: Sequence[Sequence[float]], level: float = LEVEL) -> OneWay | None:
    """One-way analysis of variance of log(values) by group; None when it cannot be judged: fewer than
    two groups, no group with two values, a value not positive, or no spread within groups."""
    from scipy import special  # the F distribution's functions without scipy.stats' per-call overhead

    values = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if len(values) < 2 or any(not (np.isfinite(v).all() and (v > 0).all()) for v in values):
        return None
    ys = [np.log(v) for v in values]
    k, n = len(ys), sum(len(y) for y in ys)
    if n - k < 1:
        return None
    grand = float(np.concatenate(ys).mean())
    df_b, df_w = k - 1, n - k
    ms_b = sum(len(y) * (float(y.mean()) - grand) ** 2 for y in ys) / df_b
    ms_w = sum(float(((y - y.mean()) ** 2).sum()) for y in ys) / df_w
    if ms_w <= 1e-24:
        return None
    f = ms_b / ms_w
    n0 = (n - sum(len(y) ** 2 for y in ys) / n) / df_b
    between2 = max(0.0, (ms_b - ms_w) / n0)
    high_q, low_q = np.asarray(special.fdtri(df_b, df_w, [(1 + level) / 2, (1 - level) / 2]), dtype=float)
    theta = [max(0.0, (f / float(q) - 1) / n0) for q in (high_q, low_q)]
    return OneWay(k, n, f, (df_b, df_w), float(special.fdtrc(df_b, df_w, f)), math.sqrt(between2), math.sqrt(ms_w),
                  between2 / (between2 + ms_w), theta[0] / (1 + theta[0]), theta[1] / (1 + theta[1]), level)


def _log_mean(values: list[float]) -> float:
    return float(np.log(np.asarray(values, dtype=float)).mean())


def effects(rows: list[dict[str, Any]], baseline: tuple[str, str], level: float = LEVEL) -> list[dict[str, Any]]:
    """For each (cell, instance) of the done `rows` (each with cell, instance, state, pair, requests_per_s)
    whose runs ran on more than one pair: each pair's runs, mean and change against `baseline` (cell,
    instance) on the same pair, and the one-way analysis, or why there is none."""
    by: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in rows:
        rps = r["requests_per_s"]
        if r["state"] == "done" and r["pair"] and isinstance(rps, float | int) and math.isfinite(rps) and rps > 0:
            by.setdefault((r["cell"], r["instance"]), {}).setdefault(r["pair"], []).append(float(rps))
    base = {p: _log_mean(v) for p, v in by.get(baseline, {}).items()}
    out: list[dict[str, Any]] = []
    for (cell, instance), pairs in sorted(by.items()):
        if len(pairs) < 2:
            continue
        a = one_way(list(pairs.values()), level)
        each = [{"pair": p, "runs": len(v), "requests_per_s": math.exp(_log_mean(v)),
                 "change": math.expm1(_log_mean(v) - base[p]) if p in base else None} for p, v in sorted(pairs.items())]
        entry: dict[str, Any] = {"cell": cell, "instance": instance, "pairs": each, "level": level}
        if a is None:
            once = all(len(v) == 1 for v in pairs.values())
            entry["note"] = ("too few repetitions: each pair ran it once, so a pair's effect cannot be told from "
                             "the noise (repeat each cell at least twice on each pair)" if once else
                             "no spread within a pair: the pair effect cannot be judged")
        else:
            entry.update({"f": a.f, "df": list(a.df), "p": a.p,
                          "between": math.expm1(a.between), "within": math.expm1(a.within),
                          "share": a.share, "share_low": a.share_low, "share_high": a.share_high, "note": ""})
        out.append(entry)
    tested = [e for e in out if "p" in e]
    for e, flagged in zip(tested, holm([e["p"] for e in tested], 1 - level), strict=True):
        e.update(flagged=flagged, tests=len(tested))
    return out
