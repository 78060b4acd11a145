"""The answer at a glance: one table that every form of a report begins with (the terminal's, Markdown,
HTML and the JSON's `summary`), computed here once as plain data and only printed by the forms.

One row an instance, or in an attribution study one row a switch: its change in throughput and in p99
at the reference's peak, each with its interval, and the verdict: a change (in a study, by Holm over its
switches) or none detected, with the change this run could have seen. Every change is said in one
direction, the cost of turning something on: an instance against the reference, and a study's switch as
the reference (all on) against the reference with that switch off, its side named beside it (the guest
kernel's, the host kernel's or the hypervisor's). The study's own instances (`no-X`, `all-off`,
`only-X`, `host-no-X`) get no rows: their change against the reference is the same fact as a switch's
cost, said from the other end.

The warnings are ranked: those that void or limit the answer (RANKED, each with what to do) stand above
the table; the rest are said beside the figures they concern."""

from __future__ import annotations

import math
from typing import Any

from vmharness.analysis import switch_why, variants
from vmharness.analysis.change_json import finite
from vmharness.analysis.intervals import TOO_FEW
from vmharness.analysis.saturation import Analysis
from vmharness.stats import LEVEL, Change

# words of a warning's first line that void or limit the answer (in a comparison after its run's name), and
# what to do about it
CLIENT = "give the load more client threads or another client machine (seed 003)"
RANKED = (
    ("not saturated:", "raise the load (more connections in the sweep) or give the server fewer CPUs, until its "
                       "CPUs are busy at the peak"),
    ("client-bound:", CLIENT),
    ("the peak may be the client's, not the server's", CLIENT),
    ("the positive control was not", "add boots (sweep.iterations) until the control's known cost is told from "
                                     "none; until then a 'no change' below says little"),
    ("the positive control cannot be judged", "keep other work off the host's CPUs during the run, and run it again"),
    ("no KVM:", "run on a host whose /dev/kvm works (vmharness host-check says why it does not) for hardware "
                "numbers"),
    ("one iteration at the peak:", "set sweep.iterations to 3 or more"),
)
# The warnings that concern the saturation curve's shape: each form prints them beside the curve (the
# baseline's peak line, the page's section of the curve), not among the answer's
ON_CURVE = ("the throughput peaks at the largest count", "the peak is not distinct", "noisy: the peak's")
UNDER = {"host": "compare runs measured on one host state, or make the difference an instance's own (its host "
                 "knobs, its QEMU, its KVM modules) so that the report names it",
         "records": "read the records named: re-measure what they lack with run --resume, or refuse such a folder "
                    "with --strict"}
NO_ANSWER = "there is no answer: what this says must be mended before a run can give one"
COLUMNS = ("instance or switch", "throughput", "p99", "verdict")


def _todo(flag: str) -> str | None:
    head = flag.split("\n", 1)[0]  # not a guest console's tail below it
    return next((todo for words, todo in RANKED if head.startswith(words) or f": {words}" in head), None)


def on_curve(flags: list[str]) -> list[str]:
    """The flags that concern the saturation curve's shape (ON_CURVE)."""
    return [f for f in flags if f.startswith(ON_CURVE)]


def ranked(flags: list[str], under: dict[str, str], answered: bool = True) -> tuple[list[dict[str, str]], list[str]]:
    """The warnings that void or limit the answer, each with what to do, and the rest. `under`: the
    flags under every figure (the host's, the records left out: saturation.py) and their kind. Without
    an answer every warning may say why: all stand first."""
    todo = {f: UNDER[under[f]] if f in under else _todo(f) or (None if answered else NO_ANSWER) for f in flags}
    return [{"text": f, "do": do} for f, do in todo.items() if do is not None], [f for f in flags if todo[f] is None]


def cell(c: Change) -> str:
    """A change and its interval as the table prints it, or why it has none."""
    if math.isnan(c.change):
        return f"n/a ({c.method})"
    if not c.bounded:
        return f"{c.change:+.1%} ({TOO_FEW})"
    return f"{c.change:+.1%} [{c.low:+.1%}, {c.high:+.1%}]"


def _change(c: Change | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"change": finite(c.change), "low": finite(c.low) if c.bounded else None, "high": finite(c.high),
            "level": c.level, "n": c.n, "changed": c.significant, "detectable": finite(c.detectable),
            "method": c.method, "text": cell(c)}


def _verdict(throughput: Change, changed: tuple[bool, bool], by: str) -> str:
    """Throughput's verdict, or p99's where only it changed; `by`: the test that judged (Holm's)."""
    if not throughput.bounded:
        return TOO_FEW
    if changed[0]:
        return f"a change{by}"
    if changed[1]:
        return f"a change in p99{by}; none detected in throughput"
    return f"no change detected (it could have seen ±{throughput.detectable:.1%})"


def _row(name: str, kind: str, on: str, off: str, throughput: Change, p99: Change | None,
         changed: tuple[bool, bool], by: str = "") -> dict[str, Any]:
    return {"name": name, "kind": kind, "side": None, "on": on, "off": off, "throughput": _change(throughput),
            "p99": _change(p99), "changed": changed[0] or changed[1],
            "verdict": _verdict(throughput, changed, by)}


def _study_rows(a: Analysis) -> tuple[list[dict[str, Any]], set[str]]:
    """A study's rows (a switch each, the guest's then the host's, then the guest's all together), each
    with its side, and the instances they speak for."""
    v = a.study
    if v is None:
        return [], set()
    mine = {"all-off", *v.off.values(), *(f"only-{o.removeprefix('no-')}" for o in v.off.values())}
    rows = []
    for family in (v.studies, v.host):
        by = {s.metric: s for s in family}
        if "throughput" not in by:
            continue
        thr, p99 = by["throughput"], {m.switch: m for m in by["p99"].marginals} if "p99" in by else {}
        for m in thr.marginals:
            q = p99.get(m.switch)
            rows.append(_row(m.switch, "switch", a.baseline, v.off.get(m.switch, f"no-{m.switch}"), m.change,
                             None if q is None else q.change, (m.holm_rejects, q is not None and q.holm_rejects),
                             " by Holm"))
        if thr.total is not None and len(thr.marginals) > 1:
            q99 = by["p99"].total if "p99" in by else None
            rows.append(_row("all switches", "total", a.baseline, "all-off", thr.total, q99,
                             (thr.total.significant, bool(q99 and q99.significant))))
    rows += [{"name": s, "kind": "switch", "on": a.baseline, "off": v.off.get(s, f"no-{s}"), "throughput": None,
              "p99": None, "changed": None, "verdict": f"left out: {why}"} for s, why in v.left_out.items()]
    for r in rows:
        r["side"] = v.sides.get(r["name"], "guest") if r["kind"] == "switch" else None
        r["why"] = next((switch_why.said(w) for w in a.switch_why if w.switch == r["name"]), None)
    return rows, mine


def _why(a: Analysis, name: str) -> str | None:
    """What explains an instance's cost (syscalls.reasons), and where its time grew most (profiles.py)."""
    said = [r.verdict for r in a.why if r.instance == name]
    cost = a.changes[name]["throughput"].significant and a.changes[name]["throughput"].change < 0
    grew = a.profiles.growers.get(name, ()) if a.profiles is not None and cost else ()  # a gain's explain none
    said += [f"its time grew most in {grew[0].name}"] if grew else []
    return "; ".join(said) or None


def build(a: Analysis) -> dict[str, Any]:
    """The summary of an analysis: plain data (JSON as it is), which every form renders."""
    top, rest = ranked(a.flags, a.under, a.peak is not None and a.peak_interval is not None)
    n = len(a.flags)
    warned = f"{n} warning{'s' * (n != 1)}" if n else "no warnings"
    out: dict[str, Any] = {"reference": a.baseline, "connections": a.peak, "requests_per_s": None,
                           "level": LEVEL, "columns": list(COLUMNS), "rows": [], "warnings": top,
                           "notes": [f for f in rest if f not in on_curve(rest)], "on_curve": on_curve(rest)}
    if a.peak is None or a.peak_interval is None:
        out["caption"] = f"ANSWER: none: the reference {a.baseline} has no saturation point ({warned})"
        return out
    where = (f"{a.baseline}'s saturation point" if a.peak_estimate is None or a.peak_estimate.at == a.peak else
             f"{a.baseline}'s peak as its first boot found it")
    rows, mine = _study_rows(a)
    for name, ch in sorted(a.changes.items()):
        if name in mine:
            continue
        row = _row(name, "instance", name, a.baseline, ch["throughput"], ch.get("p99"),
                   (ch["throughput"].significant, "p99" in ch and ch["p99"].significant))
        if a.control is not None and name == a.control.instance:
            row["verdict"] = (f"the positive control, expected {a.control.expected:+.1%}: "
                              f"{variants.verdict(a.control)}")
        rows.append({**row, "why": _why(a, name)})
    thr = a.study.studies[0].marginals if a.study is not None and a.study.studies else ()
    study = (f"; a switch: all on against it off ({thr[0].change.level:.1%} intervals, Holm over {len(thr)})"
             if thr else "")
    out.update(requests_per_s=round(a.peak_interval.mean, 1), rows=rows,
               caption=f"ANSWER at {where}, {a.peak} connections ({a.peak_interval.mean:,.0f} requests/s; "
                       f"{warned}): the cost of each against {a.baseline}{study}; {LEVEL:.0%} intervals")
    return out


def body(summary: dict[str, Any]) -> list[list[str]]:
    """The table's rows as text cells, for every form: name, throughput, p99, verdict."""
    return [[f"{r['name']} ({r['side']})" if r.get("side") else r["name"],
             "-" if r["throughput"] is None else r["throughput"]["text"],
             "-" if r["p99"] is None else r["p99"]["text"], r["verdict"]] for r in summary["rows"]]
