"""What grew per request in the server's profile, from the profiled points of `[explain] profile` (one
per instance at the baseline's peak, `perf record -e cpu-clock -a -g` over the whole guest, its stacks
folded into the run folder's profiles/, folded.py): each function's own time (its leaf frames') per
request, its share of the server's work (its processes' stacks and every interrupt's, folded.served: the
idle loop and the guest's background left out), and the functions whose share grew in a variant against
the baseline. No library says which functions of two profiles grew per request and
whether the growth is more than the samples' noise, so it is said here; inferno draws the difference
(flame.py).

A function grew when its share of the work rose by GREW or more and a one-sided Fisher exact test
(scipy.stats.fisher_exact, alternative "greater") on the sample counts (nanoseconds over one sample's
period) rejects equal shares at p < P. Shares, not times per request, are compared: a variant that
serves fewer requests in the same work (a cap outside the guest, a slower machine) makes every
function dearer per request alike, and none of them grew. What the guest does each second whatever its
load (the samplers' forks, the agent, perf) would grow per request in a slower variant, and is left
out for that reason. That is the run's positive control: its
cost lies outside the guest, so no function of the guest's kernel should grow, and if one does the
profiles cannot tell a mitigation's cost from noise at this size.

The profiler costs the server something: the profiled point's throughput is set beside the same
instance's unprofiled points, never into the sweep's statistics (profiling_cost.py)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vmharness.analysis import folded, profiling_cost, variants
from vmharness.analysis.loadcurve import damaged
from vmharness.rundir.store import RECORDS

GREW = 0.01  # of the work: a function's share must rise by this much (one percentage point; the test is what
# keeps the samples' noise out: in the runs of 2026-11-27 no function of the control came near p < P)
ALLOWANCE = 10.0  # seconds an attempt's profile may run beyond its load: perf told on and off through a FIFO
P = 0.001  # and equal shares be rejected at this level
SHOWN = 3  # growers named per variant in the text
TOP = 10  # functions given per instance in the JSON, the dearest first
POINTS = f"{GREW * 100:g} percentage point" + "s" * (GREW != 0.01)
TEST = (f"a function grew when its share of the work rose by {POINTS} or more and a "
        f"one-sided Fisher exact test on the sample counts rejects equal shares at p < {P:g}")
MISSING = ("no differential flame graphs: inferno is not installed (`make inferno` installs inferno-flamegraph and "
           "inferno-diff-folded beside vmharness)")


@dataclass(frozen=True)
class Profile:
    instance: str
    file: Path
    connections: int
    requests: int
    period_ns: float  # one sample's
    work: dict[str, int]  # the server's stacks (folded.served), in nanoseconds
    idle_ns: int
    background_ns: int  # the other processes' (samplers, agent, perf)
    cost: float | None  # its throughput against the mean of the unprofiled points at its count (its boot's)
    waited: float | None = None  # the most a vCPU thread of this point or of those waited for a host CPU, percent

    @property
    def judged(self) -> bool:
        """Whether the cost is the profiler's: no point of the comparison was held off its CPUs by other work."""
        return variants.unheld(self.waited)

    @property
    def leaves(self) -> dict[str, int]:
        """Each function's own time: the stacks it is the leaf of, summed."""
        out: dict[str, int] = {}
        for stack, ns in self.work.items():
            leaf = stack.rsplit(";", 1)[-1]
            out[leaf] = out.get(leaf, 0) + ns
        return out

    def us(self, ns: float) -> float:
        """Nanoseconds of the profile as microseconds per request."""
        return ns / self.requests / 1000

    def samples(self, ns: float) -> int:
        return round(ns / self.period_ns)


@dataclass(frozen=True)
class Grower:
    function: str  # the leaf frame as folded (a kernel one with its suffix)
    us: tuple[float, float]  # own time per request: the baseline's, the variant's
    share: tuple[float, float]  # of the work
    p: float

    @property
    def kernel(self) -> bool:
        return folded.kernel(self.function)

    @property
    def name(self) -> str:
        return folded.shown(self.function) + (" (kernel)" if self.kernel else "")


@dataclass(frozen=True)
class View:
    baseline: str
    profiles: tuple[Profile, ...]  # the baseline's first
    growers: dict[str, tuple[Grower, ...]]  # each variant's against the baseline's ({}: the baseline unprofiled)
    control: str | None  # the positive control, when it was profiled beside the baseline
    drawable: bool  # inferno was found: publish draws each variant's differential flame graph

    @property
    def connections(self) -> int:
        return self.profiles[0].connections


def view(records: Iterable[dict[str, Any]], baseline: str, run: Path, control: str | None = None,
         drawable: bool = True) -> View | None:
    """Each instance's first successful profile in the run folder `run`; None for a run without one."""
    records, where = list(records), run / RECORDS
    first: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("kind") == "profile" and r.get("ok") is True:
            first.setdefault(str(r.get("instance")), r)
    if not first:
        return None
    plain: dict[tuple[object, object], list[dict[str, Any]]] = {}  # the measurements by instance and count, once:
    for m in records:  # gone through for each profile, a records file of many instances took their product
        if m.get("kind") == "measurement" and m.get("ok"):
            with contextlib.suppress(TypeError):  # an instance or a count that is a list or an object: no profile's
                plain.setdefault((m.get("instance"), m.get("connections")), []).append(m)
    found = sorted((_profile(r, run, where, plain) for r in first.values()),
                   key=lambda p: (p.instance != baseline, p.instance))
    base = found[0] if found[0].instance == baseline else None
    grown = {} if base is None else {p.instance: growers(base, p) for p in found[1:]}
    return View(baseline, tuple(found), grown, control if control in grown else None, drawable)


def _profile(r: dict[str, Any], run: Path, where: Path, measured: dict[tuple[object, object], list[dict[str, Any]]]
             ) -> Profile:
    try:
        name = str(r["instance"])
        if not folded.NAME.fullmatch(name):
            raise ValueError(f"its instance {name[:40]!r} is not a name")
        conns, requests = int(r["connections"]), int(r["client"]["requests"])
        rps, frequency = float(r["client"]["requests_per_s"]), int(r["profile"]["frequency"])
        if requests <= 0 or frequency <= 0 or not math.isfinite(rps):
            raise ValueError("its requests, throughput or sampling frequency is not a positive number")
        path, stacks = folded.read(run, r["profile"], r.get("key"))
        if (over := _more_than_could(r, sum(stacks.values()))) is not None:
            raise ValueError(over)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise damaged(where, "profile", r.get("key"), exc) from exc
    cost, waited = profiling_cost.of(r, rps, measured.get((name, conns), []), where)
    work = {s: ns for s, ns in stacks.items() if folded.served(s)}
    idle = sum(ns for s, ns in stacks.items() if folded.idle(s))
    return Profile(name, path, conns, requests, 1e9 / frequency, work, idle,
                   sum(stacks.values()) - sum(work.values()) - idle, cost, waited)


def _more_than_could(r: dict[str, Any], ns: float) -> str | None:
    """A profile holding more CPU time than its point could: perf samples the guest's CPUs while the
    point's load runs (each attempt), so its stacks' time is at most that window times the CPUs (the most
    any of the point's samplers counted), with ALLOWANCE an attempt for perf's switching on and off and the
    wait after a failed attempt. A record without the window or the count says nothing (None)."""
    start, end, attempts = r.get("start"), r.get("end"), r.get("attempts")
    given = r.get("samples")
    counts = [m.get("ncpu") for m in given.values() if isinstance(m, dict)] if isinstance(given, dict) else []
    cpus = max((c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0), default=0)
    if not isinstance(start, int | float) or not isinstance(end, int | float) or not isinstance(attempts, int) \
            or isinstance(attempts, bool) or not cpus:
        return None
    seconds = (max(0.0, end - start) + ALLOWANCE) * max(1, attempts)
    if ns > seconds * cpus * 1e9 * 1.1:
        return (f"its stacks hold {ns / 1e9:,.1f} s of CPU time, more than its point could ({seconds:,.1f} s x "
                f"{cpus} CPUs)")
    return None


def growers(base: Profile, other: Profile) -> tuple[Grower, ...]:
    """The functions whose share of the work grew from `base` to `other` (GREW and P), the most first."""
    # scipy.stats takes 0.6 s to import: only a run with profiles pays it, not every `report` and `run`
    from scipy.stats import fisher_exact

    b, o = base.leaves, other.leaves
    tb, to = sum(b.values()), sum(o.values())  # once: summed for each leaf, 200,000 leaves took 20 minutes
    nb, no = base.samples(tb), other.samples(to)
    if not nb or not no:
        return ()
    out = []
    for leaf in sorted(o):
        kb, ko = base.samples(b.get(leaf, 0)), other.samples(o[leaf])
        share = (b.get(leaf, 0) / tb, o[leaf] / to)
        if share[1] - share[0] < GREW:
            continue
        p = float(fisher_exact(np.array([[ko, no - ko], [kb, nb - kb]]), alternative="greater").pvalue)
        if p < P:
            out.append(Grower(leaf, (base.us(b.get(leaf, 0)), other.us(o[leaf])), share, p))
    return tuple(sorted(out, key=lambda g: (g.share[0] - g.share[1], g.function)))


def control_growers(v: View | None) -> tuple[Grower, ...]:
    """The functions of the guest's kernel that grew in the positive control (none should)."""
    return () if v is None or v.control is None else tuple(g for g in v.growers[v.control] if g.kernel)


def control_flag(v: View | None) -> str | None:
    grew = control_growers(v)
    if v is None or not grew:
        return None
    return (f"control: {', '.join(folded.shown(g.function) for g in grew)} grew per request in the guest's kernel "
            f"under {v.control}, whose cost lies outside the guest: the profiles cannot tell a mitigation's cost "
            "from noise at this size")


def _us(x: float) -> str:
    return f"{x:+,.0f}" if abs(x) >= 100 else f"{x:+.1f}" if abs(x) >= 1 else f"{x:+.3f}"


def said_grower(g: Grower) -> str:
    return f"{g.name} {_us(g.us[1] - g.us[0])} µs (share {g.share[0]:.1%} -> {g.share[1]:.1%})"


def lines(v: View | None) -> list[str]:
    if v is None:
        return []
    out = [f"what grew per request in the server's profile at {v.connections} connections (perf's cpu-clock "
           "samples of the whole guest in one extra point per instance; the server's work is its processes' and "
           "every interrupt's, the idle loop and the guest's other processes left out; a function grew when its "
           f"share of that work rose by {POINTS} or more, one-sided Fisher exact p < {P:g}):"]
    if v.profiles[0].instance != v.baseline:
        out.append(f"  {v.baseline} was not profiled: there is nothing to compare the profiles against")
    elif not v.growers:
        out.append(f"  only {v.baseline} was profiled: no variant to compare with it")
    for name, grew in v.growers.items():
        said = ", ".join(said_grower(g) for g in grew[:SHOWN])
        out.append(f"  {name}: " + (f"grew most per request: {said}" if grew else "nothing grew"))
    costs = [f"{p.instance} {p.cost:+.1%}" + ("" if p.judged else f" (not to be judged: a vCPU thread waited "
                                                  f"{p.waited:.0f}% of the time for a host CPU other work held)")
             for p in v.profiles if p.cost is not None]
    if costs:
        out.append(f"  profiling changed throughput against the unprofiled points at that count: {', '.join(costs)} "
                   "(kept out of every other figure)")
    if v.control is not None:
        out.append(f"  {control_flag(v)}" if control_growers(v) else
                   "  control: no function of the guest's kernel grew per request (its cost is outside the "
                   "guest, as it must be): the profiles' negative control holds")
    if v.growers and not v.drawable:
        out.append(f"  {MISSING}")
    return out


def grower_json(g: Grower) -> dict[str, Any]:
    return {"function": folded.shown(g.function), "kernel": g.kernel,
            "us_per_request": [round(x, 4) for x in g.us], "share": [round(x, 5) for x in g.share], "p": g.p}


def _instance_json(p: Profile) -> dict[str, Any]:
    """An instance's profile: its work and idle time per request, and its dearest functions' own time."""
    work = sum(p.work.values())
    top = sorted(p.leaves.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    return {"file": p.file.name, "requests": p.requests, "profiling_cost": p.cost, "profiling_cost_judged": p.judged,
            "vcpu_wait_percent": None if p.waited is None else round(p.waited, 1),
            "work_us_per_request": round(p.us(work), 4), "idle_us_per_request": round(p.us(p.idle_ns), 4),
            "background_us_per_request": round(p.us(p.background_ns), 4),
            "top": [{"function": folded.shown(f), "kernel": folded.kernel(f), "us_per_request": round(p.us(ns), 4),
                     "share": round(ns / work, 5)} for f, ns in top]}


def to_json(v: View | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"baseline": v.baseline, "connections": v.connections, "test": TEST,
            "instances": {p.instance: _instance_json(p) for p in v.profiles},
            "growers": {n: [grower_json(g) for g in grew] for n, grew in v.growers.items()},
            "control": None if v.control is None else {
                "instance": v.control, "kernel_growers": [folded.shown(g.function) for g in control_growers(v)]}}
