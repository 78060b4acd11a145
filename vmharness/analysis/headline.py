"""The answer in a few lines, where a report begins once its warnings are said: each instance's change in
throughput and p99 at the baseline's saturation point with its interval, whether the positive control
was recovered, what explains each cost (syscalls.reasons) and where its time grew most (profiles.py), an
attribution study's switches that cost, and
how many warnings stand above. Every
figure in it is one the detail below gives again with its method; a change is written as everywhere in
the report (`pct`)."""

from __future__ import annotations

import math

from vmharness.analysis import switch_why, variants
from vmharness.analysis.saturation import Analysis
from vmharness.stats import Change

TITLE = "ANSWER"


def pct(c: Change, short: bool = False) -> str:
    """A change with its interval, or what stands for one (no ratio, one iteration, none detected)."""
    if math.isnan(c.change):
        return f"n/a ({c.method})"
    if not c.bounded:
        return f"{c.change:+.1%} (one iteration: no interval)"
    out = f"{c.change:+.1%} [{c.low:+.1%}, {c.high:+.1%}]"
    if c.significant:
        return out
    if short:
        return f"{out} (none detected; ±{c.detectable:.1%} detectable)"
    return f"{out}: no change detected; this run could have seen ±{c.detectable:.1%}"


def lines(a: Analysis) -> list[str]:
    """The headline: its first line, then one line an instance."""
    n = len(a.flags)
    warned = f"{n} warning{'s' * (n != 1)} above" if n else "no warnings"
    if a.peak is None or a.peak_interval is None:
        return [f"{TITLE}: none: the baseline {a.baseline} has no saturation point ({warned})"]
    where = (f"{a.baseline}'s saturation point" if a.peak_estimate is None or a.peak_estimate.at == a.peak else
             f"{a.baseline}'s peak as its first boot found it")
    out = [f"{TITLE} at {where}, {a.peak} connections ({a.peak_interval.mean:,.0f} requests/s; {warned}):"]
    for name, ch in sorted(a.changes.items()):
        line = f"  {name}: throughput {pct(ch['throughput'], True)}; p99 {pct(ch['p99'], True)}"
        if a.control is not None and name == a.control.instance:
            line += f"; the positive control, expected {a.control.expected:+.1%}: {variants.verdict(a.control)}"
        line += "".join(f"; why: {r.verdict}" for r in a.why if r.instance == name)
        cost = ch["throughput"].significant and ch["throughput"].change < 0  # a gain's growers explain no cost
        grew = a.profiles.growers.get(name, ()) if a.profiles is not None and cost else ()
        if grew:
            line += f"; its time grew most in {grew[0].name}"
        out.append(line)
    if a.study is not None and a.study.studies:
        thr = a.study.studies[0]
        named = [f"{m.switch} {pct(m.change, True)}" for m in thr.marginals if m.holm_rejects]
        rest = len(thr.marginals) - len(named)
        level = thr.marginals[0].change.level
        out.append(f"  attribution (throughput, each switch on against off: {level:.1%} intervals, Holm over "
                   f"{len(thr.marginals)}): "
                   + ("; ".join(named) or "no switch told from none")
                   + (f"; {rest} not told from none" if named and rest else "")
                   + (f"; {len(a.study.left_out)} left out" if a.study.left_out else "")
                   + switch_why.headline(a.switch_why))
    return out
