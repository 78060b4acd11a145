"""`campaign report`: one table over every cell. The runs that are done are compared as `report
compare` compares run folders (analysis/saturation.compare: each instance named CELL/INSTANCE, the
baseline cell's first instance the baseline, every figure at the baseline's peak); each row gives the
cell's throughput there, its p99, its cost against the baseline with its interval, the nodes it ran on,
and for a cell that is not done its state and why. A repeated cell has a row per run (repetition), and
where its runs lay on more than one node pair, the pair effect (paireffect.py). Text, Markdown, CSV, JSON;
the HTML page and its figure: published.py."""

from __future__ import annotations

import math
import statistics
from typing import Any

from vmharness import table, textsafe
from vmharness.analysis import saturation
from vmharness.analysis.change_json import change_json
from vmharness.analysis.report import csv_text, rows_of
from vmharness.campaign import paireffect
from vmharness.campaign.folder import CampaignDir
from vmharness.campaign.state import CellState, states
from vmharness.errors import HarnessError
from vmharness.rundir.store import RunDir

COLUMNS = ("cell", "instance", "state", "requests_per_s", "p99_us", "throughput_change", "change_low",
           "change_high", "server", "client", "job", "why", "run", "repeat", "pair", "pair_change", "pair_effect_p")


def _compare(cdir: CampaignDir, done: list[CellState], baseline: str) -> tuple[dict[str, Any], list[str], str]:
    """key RUN/INSTANCE -> (row at the baseline's peak, throughput change); the comparison's warnings;
    the baseline's instance."""
    if not done:
        return {}, [], ""
    runs = [RunDir.open(cdir.run_path(c.name)) for c in done]
    names = [c.name for c in done]
    base_run = runs[names.index(baseline)] if baseline in names else runs[0]
    first = base_run.manifest["config"]["instance"][0]["name"]
    a = saturation.compare(runs, f"{base_run.path.name}/{first}")
    rows = {f"{r['instance']}": r for r in rows_of(a) if r["connections"] == a.peak}
    out: dict[str, Any] = {}
    for key in a.cells:
        ch = a.changes.get(key, {}).get("throughput")
        out[key] = (rows.get(key), change_json(ch))
    return out, [f"the comparison's peak: {a.peak} connections (the baseline {a.baseline}'s)", *a.flags], first


def _pair_note(plan: dict[str, Any], runs: int) -> str:
    if plan["slurm"].get("pairs"):
        return f"node pairs controlled: each cell's runs spread over {', '.join(map(str, plan['slurm']['pairs']))}"
    if plan["backend"] == "slurm":
        return "node pairs not controlled: Slurm placed each run (name [slurm] pairs to spread a cell's runs)"
    return "one node pair (this machine): no pair effect can be estimated" if runs > len(plan["cells"]) else ""


def build(cdir: CampaignDir, plan: dict[str, Any], queued: dict[str, str] | None = None) -> dict[str, Any]:
    cells = states(cdir, plan)
    if queued:
        cells = [c if c.name not in queued or c.state == "done" else
                 CellState(c.name, queued[c.name], c.why, c.server, c.client, c.job) for c in cells]
    runs = {r["name"]: r for r in plan["runs"]}
    done = [c for c in cells if c.state == "done"]
    bases = sorted((runs[c.name]["repeat"], c.name) for c in done if runs[c.name]["cell"] == plan["baseline"])
    try:
        figures, notes, first = _compare(cdir, done, bases[0][1] if bases else plan["baseline"])
    except HarnessError as exc:
        figures, notes, first = {}, [f"the done cells could not be compared: {exc.message}"], ""
    rows: list[dict[str, Any]] = []
    for c in cells:
        run = runs[c.name]
        mine: list[str | None] = [k for k in sorted(figures) if k.split("/", 1)[0] == c.name]
        for key in mine or [None]:
            row, change = figures.get(key, (None, None)) if key else (None, None)
            rows.append({"cell": run["cell"], "run": c.name, "repeat": run["repeat"],
                         "pair": run["pair"] or "/".join(x for x in (c.server, c.client) if x),
                         "instance": key.split("/", 1)[1] if key else "", "state": c.state,
                         "requests_per_s": row["requests_per_s"] if row else None,
                         "p99_us": row.get("p99_us") if row else None,
                         "throughput_change": change["change"] if change else None,
                         "change_low": change["low"] if change else None,
                         "change_high": change["high"] if change else None,
                         "server": c.server, "client": c.client, "job": c.job, "why": c.why})
    values = {c["name"]: c["values"] for c in plan["cells"]}
    effects = paireffect.effects(rows, (plan["baseline"], first))
    for r in rows:
        e = next((e for e in effects if (e["cell"], e["instance"]) == (r["cell"], r["instance"])), None)
        on: dict[str, Any] = next((p for p in e["pairs"] if p["pair"] == r["pair"]), {}) if e else {}
        r["pair_change"], r["pair_effect_p"] = on.get("change"), (e or {}).get("p")
    notes = [n for n in [_pair_note(plan, len(runs)), *notes] if n]
    return {"baseline": plan["baseline"], "notes": notes, "rows": rows, "values": values, "pairs": pairs(rows),
            "pair_effects": effects, "repeats": plan.get("repeats", 1),
            "counts": {s: sum(c.state == s for c in cells) for s in sorted({c.state for c in cells})}}


def pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each node pair that ran a done cell: its cells and their median throughput change, so that a pair
    whose cells all lean one way shows (a pair effect is confounded with the cells it ran: spread them)."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["state"] == "done" and r["server"]:
            by.setdefault((r["server"], r["client"]), []).append(r)
    out = []
    for (server, client), rs in sorted(by.items()):
        changes = [r["throughput_change"] for r in rs if r["throughput_change"] is not None]
        out.append({"server": server, "client": client, "cells": sorted({r["cell"] for r in rs}),
                    "median_change": statistics.median(changes) if changes else None})
    return out


def pct(v: Any) -> str:
    return "" if not isinstance(v, float | int) or not math.isfinite(v) else f"{v * 100:+.1f}%"


def row_cells(r: dict[str, Any]) -> list[str]:
    rps = r["requests_per_s"]
    interval = (f"[{pct(r['change_low'])}, {pct(r['change_high'])}]"
                if r["throughput_change"] is not None else "")
    return [r["run"], r["instance"], r["state"], "" if rps is None else f"{rps:,.0f}",
            "" if r["p99_us"] is None else f"{r['p99_us']:,.0f}", f"{pct(r['throughput_change'])} {interval}".strip(),
            "/".join(x for x in (r["server"], r["client"]) if x), r["why"]]


HEADER = ["run", "instance", "state", "req/s", "p99 us", "throughput vs baseline [95%]", "nodes", "why"]
EFFECT_HEADER = ["cell", "instance", "each pair: runs, change vs the baseline on that pair",
                 "between pairs (sd, share [95%])", "F, p"]


def effect(e: dict[str, Any]) -> list[str]:
    each = ", ".join(f"{p['pair']} ({p['runs']}) " + (pct(p["change"]) or "no baseline there") for p in e["pairs"])
    if e["note"]:
        return [e["cell"], e["instance"], each, e["note"], ""]
    return [e["cell"], e["instance"], each,
            f"{pct(e['between'])[1:]}, {e['share']:.0%} [{e['share_low']:.0%}, {e['share_high']:.0%}]",
            f"F({e['df'][0]}, {e['df'][1]}) = {e['f']:.2f}, p = {e['p']:.3g}"
            + f" (a pair effect by Holm over {e['tests']} test{'s' * (e['tests'] != 1)})" * e["flagged"]]


def text(rep: dict[str, Any]) -> str:
    lines = [f"campaign: {len({r['cell'] for r in rep['rows']})} cells, baseline {rep['baseline']}; "
             + ", ".join(f"{n} {s}" for s, n in rep["counts"].items())]
    lines += table.render(HEADER, [[textsafe.line(x) for x in row_cells(r)] for r in rep["rows"]])
    if len(rep["pairs"]) > 1:
        lines += ["", "node pairs (server/client: cells, median throughput change):"]
        lines += [f"  {textsafe.line(p['server'])}/{textsafe.line(p['client'])}: {len(p['cells'])} cells, "
                  f"{pct(p['median_change']) or 'no change measured'}" for p in rep["pairs"]]
    if rep["pair_effects"]:
        lines += ["", "pair effect (each cell run on more than one node pair):"]
        lines += table.render(EFFECT_HEADER, [[textsafe.line(x) for x in effect(e)] for e in rep["pair_effects"]])
    lines += [f"note: {textsafe.line(n)}" for n in rep["notes"]]
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    head = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    return head + "".join("| " + " | ".join(textsafe.markdown(x).replace("|", "\\|") for x in r) + " |\n"
                          for r in rows)


def markdown(rep: dict[str, Any]) -> str:
    out = _md_table(HEADER, [row_cells(r) for r in rep["rows"]])
    if rep["pair_effects"]:
        out += "\n" + _md_table(EFFECT_HEADER, [effect(e) for e in rep["pair_effects"]])
    return out + "".join(f"\n{textsafe.markdown(n)}\n" for n in rep["notes"])


def csv(rep: dict[str, Any]) -> str:
    return csv_text([{k: r[k] for k in COLUMNS} for r in rep["rows"]])
