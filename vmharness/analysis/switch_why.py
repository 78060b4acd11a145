"""Why each switch of an attribution study costs what it does: the reference (every switch on) read
against that switch's leave-one-out, as a variant is read against the baseline: its system calls and
its vCPUs' time per request (syscalls.reasons) and what grew in its profile (profiles.growers). The
variants' own explanations are against the reference, where a leave-one-out is a gain; a switch's cost
is the reference against it. Only the switches Holm names as costing throughput are explained, as only
a cost the run detected is elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness.analysis import profiles, studies, syscalls


@dataclass(frozen=True)
class Why:
    switch: str
    reference: str  # the study's all-on
    against: str  # its leave-one-out, no-X
    reason: syscalls.Reason | None  # None: either was not counted, or the readings are missing
    grew: tuple[profiles.Grower, ...] | None  # None: either was not profiled


def explain(study: studies.View | None, records: list[dict[str, Any]], where: Path, work_us: dict[str, float | None],
            profiled: profiles.View | None, reference: str) -> tuple[Why, ...]:
    if study is None or not (study.studies or study.host):
        return ()
    by = {p.instance: p for p in profiled.profiles} if profiled is not None else {}
    out = []
    for m in (*(study.studies[0].marginals if study.studies else ()), *(study.host[0].marginals if study.host else ())):
        if not m.holm_rejects:
            continue
        base = study.off.get(m.switch, f"no-{m.switch}")
        found = syscalls.reasons(syscalls.view(records, base, where), work_us, {reference: m.change.change})
        reason = next((r for r in found if r.instance == reference), None)
        grew = profiles.growers(by[base], by[reference]) if base in by and reference in by else None
        if reason is not None or grew is not None:
            out.append(Why(m.switch, reference, base, reason, grew))
    return tuple(out)


def _said(w: Why) -> list[str]:
    parts = [f"{w.reason.reading}: {w.reason.verdict}"] if w.reason is not None else []
    if w.grew is not None:
        parts.append("grew most per request: " + ", ".join(profiles.said_grower(g) for g in w.grew[:profiles.SHOWN])
                     if w.grew else "nothing grew in its profile")
    return parts


def lines(found: tuple[Why, ...]) -> list[str]:
    if not found:
        return []
    return [f"why each switch costs what it does ({found[0].reference} against the switch turned off, from the "
            "counted and profiled points):", *(f"  {w.switch} ({w.reference} against {w.against}): "
                                               f"{'; '.join(_said(w))}" for w in found)]


def said(w: Why) -> str | None:
    """What the answer's table adds to an explained switch: its verdict and its first grower."""
    out = [w.reason.verdict] if w.reason is not None else []
    out += [f"its time grew most in {w.grew[0].name}"] if w.grew else []
    return "; ".join(out) or None


def to_json(found: tuple[Why, ...]) -> dict[str, Any]:
    return {w.switch: {"against": w.against,
                       "reading": w.reason.reading if w.reason is not None else None,
                       "verdict": w.reason.verdict if w.reason is not None else None,
                       "growers": None if w.grew is None else [profiles.grower_json(g) for g in w.grew]}
            for w in found}
