"""Which mitigation costs what: the statistics of an attribution study, one metric at one load point.

Written here because no library does it: the comparisons are paired by boot across many variants at
once (a block is one boot of every variant, sharing drift and the host's state), taken on log ratios
with a handful of boots, and judged as a family (Holm over the switches) rather than one by one.

The variants, in `table` (variant name -> {block: value}): `all_on` (the reference), `all_off` (may be
absent), `leave_one_out[s]` for every switch s and, optionally, `one_on[s]`. With l_b(v) = log v_b:
- marginal cost of s: all_on/leave_one_out[s] - 1 = expm1(mean_b d_b), d_b = l_b(all_on) - l_b(loo_s),
  Student-t interval on mean d at the Bonferroni level 1 - (1 - level)/m (simultaneous over the m
  switches) and a two-sided paired t-test p; Holm's step-down rejects the k-th smallest p while
  p_(k) <= (1 - level)/(m - k + 1). Its cost alone, one_on[s]/all_off - 1, is a family of its own;
- total: all_on/all_off - 1; interaction: expm1 of the mean over the blocks holding every variant of
  I_b = [l_b(all_on) - l_b(all_off)] - sum_s [l_b(all_on) - l_b(loo_s)], with its t-interval at `level`
  (not adjusted), and its share of the total: mean I_b / mean [l_b(all_on) - l_b(all_off)], what the
  sum of marginal costs fails to explain.
A value that is not finite and positive has no logarithm: its block is left out of each comparison that
needs it, and counted. The numbers are ratios other/base whatever the metric; `higher_is_better` only
says whether a rise or a fall is called a cost."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

import numpy as np

from vmharness.stats import LEVEL, Change, p_value, positive, ratio_change

ALL_ON = "all_on"
ALL_OFF = "all_off"
K = TypeVar("K", bound=Hashable)  # a block


def leave_one_out(switch: str) -> str:
    """The name, in a table, of the variant with every mitigation on except `switch`."""
    return f"leave_one_out[{switch}]"


def one_on(switch: str) -> str:
    """The name, in a table, of the variant with every mitigation off except `switch`."""
    return f"one_on[{switch}]"


@dataclass(frozen=True)
class Marginal:
    switch: str
    change: Change  # other/base - 1, at the Bonferroni-adjusted level
    p: float  # two-sided paired t-test on the log ratios, not adjusted; NaN without two blocks
    holm_rejects: bool  # the switch changes the metric, by Holm's step-down over the family


@dataclass(frozen=True)
class Study:
    metric: str
    higher_is_better: bool
    marginals: tuple[Marginal, ...]  # all_on / leave_one_out[s]
    alone: tuple[Marginal, ...]  # one_on[s] / all_off, empty without one_on variants
    total: Change | None  # all_on / all_off; None without all_off
    interaction: Change | None  # None without all_off
    interaction_share: float  # of the total's log; NaN where undefined
    left_out_blocks: int  # blocks the interaction left out: one of its variants missing or not positive
    method: str

    def to_json(self) -> dict[str, Any]:
        plain: dict[str, Any] = _plain(asdict(self))
        return plain

    def lines(self) -> list[str]:
        """One line a switch, then the total and the interaction, in words (with one switch, the total is
        its cost and nothing is left to interact: neither is said)."""
        out = [f"{m.switch}{suffix}: {describe(m.change, self.higher_is_better)}, "
               f"{'a change' if m.holm_rejects else 'not told from none'} by Holm"
               for family, suffix in ((self.marginals, ""), (self.alone, " alone")) for m in family]
        if self.total is not None and self.interaction is not None and len(self.marginals) > 1:
            out.append(f"all together: {describe(self.total, self.higher_is_better)}")
            out.append(f"interaction: {describe(self.interaction, self.higher_is_better)}, "
                       f"{_pct(self.interaction_share)} of the total's log")
        return out


def describe(c: Change, higher_is_better: bool) -> str:
    """A change as a cost or a saving: for a metric where higher is better a fall is a cost."""
    if not math.isfinite(c.change):
        return "no ratio"
    word = "costs" if (c.change < 0) == higher_is_better else "saves"
    return f"{word} {abs(c.change):.1%} ({c.level:.1%} interval {_pct(c.low)} to {_pct(c.high)})"


def _pct(x: float) -> str:
    return f"{x:+.1%}" if math.isfinite(x) else ("unbounded" if math.isinf(x) else "undefined")


def _plain(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x


def _compare(base: Mapping[K, float] | None, other: Mapping[K, float] | None,
             level: float) -> tuple[Change, float]:
    """other/base paired by boot on the blocks where both are finite and positive, and the p of a paired
    t-test on the log ratios (NaN with fewer than two blocks)."""
    b, o = positive(base), positive(other)
    common = [k for k in b if k in o]
    left = len(set(base or {}) | set(other or {})) - len(common)
    if common:
        change = ratio_change({k: b[k] for k in common}, {k: o[k] for k in common}, block="boot", level=level)
    else:
        change = Change(math.nan, -1.0, math.inf, math.inf, 0, level, "no block holds both: no ratio")
    note = f"; {left} block{'s' * (left != 1)} left out (missing, or not finite and positive)" if left else ""
    change = replace(change, method=change.method + note)
    return change, p_value(np.log([o[k] / b[k] for k in common]))


def holm(ps: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: reject the k-th smallest p (k from 1) while p_(k) <= alpha / (m - k + 1). A NaN
    p (no test) is never rejected and still counts in m. Written here: scipy has no Holm (its
    false_discovery_control is Benjamini-Hochberg's), and statsmodels' multipletests, which has it,
    would be a large dependency for these lines; tests/unit/test_attribution.py holds its error rate."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i] if math.isfinite(ps[i]) else math.inf)
    rejects = [False] * m
    for k, i in enumerate(order):
        if not (math.isfinite(ps[i]) and ps[i] <= alpha / (m - k)):
            break
        rejects[i] = True
    return rejects


def _family(base: Mapping[str, Mapping[K, float] | None], other: Mapping[str, Mapping[K, float] | None],
            level: float) -> tuple[Marginal, ...]:
    alpha = (1 - level) / len(base)
    pairs = [_compare(base[s], other[s], 1 - alpha) for s in base]
    rejects = holm([p for _, p in pairs], 1 - level)
    return tuple(Marginal(s, c, p, r) for s, (c, p), r in zip(base, pairs, rejects, strict=True))


def _complete(table: Mapping[str, Mapping[K, float]], names: Sequence[str]) -> tuple[list[K], int]:
    """The blocks where every variant in `names` is finite and positive, and how many blocks are not."""
    good = [positive(table.get(v)) for v in names]
    every = {k for v in names for k in table.get(v, {})}
    blocks = [k for k in good[0] if all(k in g for g in good[1:])]
    return blocks, len(every) - len(blocks)


def study(metric: str, table: Mapping[str, Mapping[K, float]], switches: Sequence[str], *,
          higher_is_better: bool = True, level: float = LEVEL) -> Study:
    """The attribution of `metric` to `switches` (see the module's docstring). Raises ValueError only for
    a call that cannot be right: no switches, a switch named twice, no all_on variant."""
    if not switches or len(set(switches)) != len(switches):
        raise ValueError(f"switches must be distinct and at least one: {list(switches)}")
    if ALL_ON not in table:
        raise ValueError(f"no {ALL_ON!r} variant in the table: {sorted(table)}")
    m = len(switches)
    on = table[ALL_ON]
    marginals = _family({s: table.get(leave_one_out(s)) for s in switches}, dict.fromkeys(switches, on), level)
    alone: tuple[Marginal, ...] = ()
    if any(one_on(s) in table for s in switches):
        alone = _family(dict.fromkeys(switches, table.get(ALL_OFF)), {s: table.get(one_on(s)) for s in switches},
                        level)
    total = interaction = None
    share, left = math.nan, 0
    if ALL_OFF in table:
        total, _ = _compare(table[ALL_OFF], on, level)
        names = [ALL_ON, ALL_OFF, *(leave_one_out(s) for s in switches)]
        blocks, left = _complete(table, names)
        logs = {v: np.log([float(table[v][k]) for k in blocks]) if v in table else np.zeros(0) for v in names}
        whole = logs[ALL_ON] - logs[ALL_OFF]
        d = whole - sum((logs[ALL_ON] - logs[leave_one_out(s)] for s in switches), np.zeros(len(blocks)))
        # exp(I_b) against 1 in every block: the paired t-interval of a log ratio, as every change's
        interaction = ratio_change(dict.fromkeys(blocks, 1.0), dict(zip(blocks, np.exp(d), strict=True)), "boot",
                                   level) if blocks else \
            Change(math.nan, -1.0, math.inf, math.inf, 0, level, "no block holds every variant: no interaction")
        if left:
            interaction = replace(interaction, method=interaction.method + f"; {left} block{'s' * (left != 1)} "
                                  "left out (a variant missing, or not finite and positive)")
        if blocks and whole.mean() != 0:
            share = float(d.mean() / whole.mean())
    method = (f"Bonferroni-adjusted {level:.0%} intervals over {m} switch{'es' * (m != 1)}; Holm's step-down for "
              f"which switches cost (family-wise {1 - level:.0%}); interaction and total at {level:.0%}, not adjusted")
    return Study(metric, higher_is_better, marginals, alone, total, interaction, share, left, method)


def waterfall(table: Mapping[str, Mapping[K, float]], switches: Sequence[str]) -> list[tuple[str, float, float]]:
    """The steps from all off to all on, for a figure: (label, start, end), on the blocks holding every
    variant. Starts at all_off's geometric mean, one step a switch by its marginal cost (largest first),
    then the interaction, which ends at all_on's geometric mean (with one switch all off is its leave-one-out,
    and there is nothing to interact: no such step). Empty without such a block."""
    names = [ALL_ON, ALL_OFF, *(leave_one_out(s) for s in switches)]
    if any(v not in table for v in names):
        return []
    blocks, _ = _complete(table, names)
    if not blocks:
        return []
    mean = {v: float(np.mean(np.log([float(table[v][k]) for k in blocks]))) for v in names}
    costs = sorted(((s, mean[ALL_ON] - mean[leave_one_out(s)]) for s in switches), key=lambda sc: -abs(sc[1]))
    steps, level = [], mean[ALL_OFF]
    for s, c in costs:
        steps.append((s, math.exp(level), math.exp(level + c)))
        level += c
    if len(switches) > 1:
        steps.append(("interaction", math.exp(level), math.exp(mean[ALL_ON])))
    return steps
