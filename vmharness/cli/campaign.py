"""`vmharness campaign plan|submit|status|cancel|report`: a matrix of bench or run configurations, each
cell run into its own run folder of the campaign folder, here one after the other (local) or as one
Slurm job array over node pairs (slurm), gathered into one table (docs/campaign.md)."""

from __future__ import annotations

import argparse
import dataclasses
import socket
from pathlib import Path
from typing import Any

from vmharness import environ, textsafe
from vmharness.campaign import spec
from vmharness.campaign.folder import CampaignDir
from vmharness.digits import is_digits
from vmharness.errors import HarnessError
from vmharness.progress import say


def _where(c: spec.Campaign, backend: str) -> str:
    runs = len(c.cells) * c.repeats
    if backend == "local":
        return (f"local: {runs} runs one after the other on {socket.gethostname()} (and the clients each "
                "configuration names): one pair")
    extra = f" --constraint={c.slurm.constraint}" * bool(c.slurm.constraint)
    extra += f" --partition={c.slurm.partition}" * bool(c.slurm.partition)
    arrays = (f"one job array per pair ({', '.join(c.slurm.pairs)}: --constraint=...&PAIR) of {runs} runs in all, "
              "each cell's repetitions spread over the pairs" if c.slurm.pairs else
              f"one job array of {runs} elements (the pairs as Slurm places them: not controlled)")
    return (f"slurm: {arrays}, each --nodes=2 --exclusive{extra}: the first node the server, the second "
            + ("every [[client]]" if c.slurm.client == "node" else "unused (the configuration's clients)"))


def _here(args: argparse.Namespace) -> None:
    """A campaign works on this machine and its cluster: --host-root (which every command takes) means nothing."""
    if args.host_root is not None:
        raise HarnessError("campaign does not read a host root (--host-root)", "drop --host-root")


def _backend(args: argparse.Namespace, c: spec.Campaign) -> str:
    return str(args.backend or c.backend)


def cmd_plan(args: argparse.Namespace) -> int:
    _here(args)
    c = spec.load(Path(args.campaign))
    backend = _backend(args, c)
    out = Path(args.out) if args.out else None
    if out is not None:
        CampaignDir.preflight(out)
    from vmharness.campaign import design

    runs = design.runs([cell.name for cell in c.cells], c.repeats, c.slurm.pairs if backend == "slurm" else (), c.seed)
    cells: list[dict[str, Any]] = [{"name": cell.name, "values": cell.values, "runs": [
        {**r.json(), "run_dir": str(out / "runs" / r.name) if out else None} for r in runs if r.cell == cell.name]}
        for cell in c.cells]
    if args.json:
        print(textsafe.json_text({"command": c.command, "backend": backend, "where": _where(c, backend),
                                  "baseline": c.baseline, "repeats": c.repeats, "cells": cells,
                                  "order": [r.name for r in runs]}))
        return 0
    print(f"{len(cells)} cells of `vmharness {c.command}`" + f", each run {c.repeats} times" * (c.repeats > 1)
          + f", baseline {c.baseline}")
    print(_where(c, backend))
    for cell in cells:
        values = ", ".join(f"{k}={textsafe.json_text(v, indent=None)}" for k, v in cell["values"].items())
        print(f"  {cell['name']}: {values}")
        for r in cell["runs"] if c.repeats > 1 or c.slurm.pairs or out else []:
            print(f"    {r['name']}" + f" on {r['pair']}" * bool(r["pair"])
                  + (f" -> {r['run_dir']}" if r["run_dir"] else ""))
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from vmharness.campaign import runner, slurm, state

    _here(args)
    c = spec.load(Path(args.campaign))
    backend = _backend(args, c)
    out = Path(args.out)
    CampaignDir.preflight(out)
    if args.backend and args.backend != c.backend:
        c = dataclasses.replace(c, backend=args.backend)
    cdir = CampaignDir.write(out, c)
    _, plan = CampaignDir.open(out)
    if backend == "local":
        return runner.run_local(cdir, plan, say)
    queued = slurm.cell_jobs(cdir, slurm.squeue()) if slurm.jobs(cdir) else {}
    todo = [s.name for s in state.states(cdir, plan) if s.state != "done" and s.name not in queued]
    if not todo:
        print("every cell is done or queued: nothing submitted")
        return 0
    pair_of = {r["name"]: r["pair"] for r in plan["runs"]}
    for pair in dict.fromkeys(pair_of[n] for n in todo):  # one job array per pair, in the design's order
        mine = [n for n in todo if pair_of[n] == pair]
        job = slurm.submit(cdir, mine, c.slurm, pair)
        print(f"submitted job {job.job}: {len(mine)} " + ("runs" if c.repeats > 1 else "cells")
              + f" on pair {pair}" * bool(pair))
    return 0


def _queued(cdir: CampaignDir, plan: dict[str, Any]) -> dict[str, str]:
    from vmharness.campaign import slurm

    return slurm.cell_jobs(cdir, slurm.squeue()) if plan["backend"] == "slurm" and slurm.jobs(cdir) else {}


def cmd_status(args: argparse.Namespace) -> int:
    from vmharness.campaign import state

    _here(args)
    cdir, plan = CampaignDir.open(Path(args.folder))
    queued = _queued(cdir, plan)
    runs = {r["name"]: r for r in plan["runs"]}
    rows = [{"cell": runs[s.name]["cell"], "run": s.name, "repeat": runs[s.name]["repeat"],
             "pair": runs[s.name]["pair"], "state": queued.get(s.name, s.state) if s.state != "done" else s.state,
             "why": s.why, "server": s.server, "client": s.client, "job": s.job} for s in state.states(cdir, plan)]
    if args.json:
        print(textsafe.json_text({"cells": rows}))
    else:
        from vmharness import table
        print("\n".join(table.render(["run", "state", "nodes", "job", "why"],
                                     [[textsafe.line(x) for x in (r["run"], r["state"], "/".join(
                                         n for n in (r["server"], r["client"]) if n), r["job"], r["why"])]
                                      for r in rows])))
    return 0 if all(r["state"] == "done" for r in rows) else 1


def cmd_cancel(args: argparse.Namespace) -> int:
    from vmharness.campaign import slurm

    _here(args)
    cdir, plan = CampaignDir.open(Path(args.folder))
    if plan["backend"] != "slurm":
        raise HarnessError(f"{args.folder} runs on the local backend: nothing is queued",
                           "stop a local submit with Ctrl-C; submit again resumes it")
    done = slurm.cancel(cdir, list(args.job or []))
    print(f"cancelled: {', '.join(map(str, done)) or 'no job'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from vmharness.campaign import gather

    _here(args)
    cdir, plan = CampaignDir.open(Path(args.folder))
    rep = gather.build(cdir, plan, _queued(cdir, plan))
    fmt = "json" if args.json else args.format
    if args.out:
        from vmharness.campaign import published

        published.write(rep, Path(args.out), args.force)
    print(textsafe.json_text(rep) if fmt == "json" else gather.markdown(rep) if fmt == "markdown"
          else gather.csv(rep) if fmt == "csv" else gather.text(rep), end="\n" if fmt == "text" else "")
    if args.out:
        say(f"report: {Path(args.out) / 'campaign-report.html'} (and .txt, .md, .csv, .json and the forest plot "
            "beside it)")
    return 0


def cmd_run_cell(args: argparse.Namespace) -> int:
    from vmharness.campaign import runner, slurm

    _here(args)
    cdir, plan = CampaignDir.open(Path(args.folder))
    name = runner.read_submission(cdir, args.submission, args.index)
    array = environ.get("SLURM_ARRAY_JOB_ID") or ""
    job = f"{array}_{args.index}" if is_digits(array) else ""
    return runner.run_cell(cdir, name, plan["command"], slurm.allocation(), job, say,
                           clients_are_node=plan["slurm"].get("client") != "config")


def register(subs: Any, add: Any) -> None:
    camp = subs.add_parser("campaign", help="a matrix of runs, here or on a Slurm cluster, gathered into one table",
                           description="a matrix of bench or run configurations, run cell by cell (docs/campaign.md)")
    c_subs = camp.add_subparsers(dest="campaign_command", metavar="COMMAND", parser_class=type(camp))
    p = add(c_subs, "plan", cmd_plan, "show the cells and where they would run, changing nothing",
            "vmharness campaign plan campaign.toml")
    p.add_argument("campaign", metavar="CAMPAIGN", help="the campaign's TOML file")
    p.add_argument("--out", metavar="DIR", help="the campaign folder, to show each cell's run folder")
    p.add_argument("--backend", choices=["local", "slurm"], help="instead of campaign.backend")
    p = add(c_subs, "submit", cmd_submit, "run (local) or queue (slurm) every cell without a complete run",
            "vmharness campaign submit campaign.toml --out campaigns/mitigations", json_flag=False)
    p.add_argument("campaign", metavar="CAMPAIGN", help="the campaign's TOML file")
    p.add_argument("--out", metavar="DIR", required=True, help="the campaign folder (made, or this campaign's own)")
    p.add_argument("--backend", choices=["local", "slurm"], help="instead of campaign.backend")
    p = add(c_subs, "status", cmd_status, "where each cell stands (exit 1 until every cell is done)",
            "vmharness campaign status campaigns/mitigations")
    p.add_argument("folder", metavar="FOLDER", help="the campaign folder")
    p = add(c_subs, "cancel", cmd_cancel, "scancel the campaign's Slurm jobs (its own, recorded; no other)",
            "vmharness campaign cancel campaigns/mitigations", json_flag=False)
    p.add_argument("folder", metavar="FOLDER", help="the campaign folder")
    p.add_argument("--job", type=int, action="append", metavar="ID", help="only this job of the campaign's")
    p = add(c_subs, "report", cmd_report, "one table over every cell: its figures against the baseline cell's, "
            "its nodes, and why a cell failed or is missing", "vmharness campaign report campaigns/mitigations")
    p.add_argument("folder", metavar="FOLDER", help="the campaign folder")
    p.add_argument("--format", default="text", choices=["text", "markdown", "csv", "json"], help="text (default)")
    p.add_argument("--out", metavar="DIR", help="also write every form into DIR: text, Markdown, CSV, JSON, and an "
                   "HTML page led by the forest plot of every run's change (forest.png, .svg, .pdf beside it)")
    p.add_argument("--force", action="store_true", help="write into --out although no campaign report made it")
    p = add(c_subs, "run-cell", cmd_run_cell, "one cell in a Slurm job array element (the campaign's batch "
            "script runs it)", "vmharness campaign run-cell FOLDER slurm/submit-1.json 0", json_flag=False)
    p.add_argument("folder", metavar="FOLDER")
    p.add_argument("submission", metavar="SUBMISSION")
    p.add_argument("index", type=int, metavar="INDEX")
