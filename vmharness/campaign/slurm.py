"""The Slurm backend, a thin layer over Slurm's own commands: `sbatch` submits one job array per
submission and pair (each element two whole nodes, the first the server, the second the client; with
`[slurm] pairs`, two nodes of the pair's feature: --constraint=CONSTRAINT&PAIR), `squeue --json`
says what is queued or running, `scancel` cancels the campaign's recorded jobs and no other.

No shell string is built from a campaign's values: the element script is the harness's own text, and the
campaign folder and the submission's file reach it as arguments; the constraint and partition were
checked against a strict character set (spec.py). squeue's JSON is data: its `meta` must say it is
squeue's (Slurm 22.05 writes `meta.Slurm`, 23.02 on `meta.slurm`), and damage is one line."""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from vmharness.campaign.folder import CampaignDir, read_json
from vmharness.campaign.spec import SlurmOptions
from vmharness.errors import HarnessError
from vmharness.model.hostname import check_host
from vmharness.system import proc

JOBS = "slurm/jobs.json"
TIMEOUT = 60  # seconds: for one Slurm command
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")  # not over yet
ELEMENT = """#!/bin/sh
# vmharness campaign: one element of a job array runs one cell ($1: the campaign folder, $2: the
# submission's list of cells); the first node of the allocation is the server, the second the client.
exec {python} -m vmharness.cli campaign run-cell "$1" "$2" "$SLURM_ARRAY_TASK_ID"
"""


@dataclass(frozen=True)
class Job:
    job: int
    cells: tuple[str, ...]  # array element i runs cells[i]


def jobs(cdir: CampaignDir) -> list[Job]:
    """The jobs the campaign submitted, as recorded; a damaged record is an error."""
    got = read_json(cdir.path, JOBS)
    if got is None:
        return []
    items = got.get("jobs") if isinstance(got, dict) else None
    if not isinstance(items, list) or not all(
            isinstance(j, dict) and isinstance(j.get("job"), int) and not isinstance(j.get("job"), bool)
            and isinstance(j.get("cells"), list) and all(isinstance(c, str) for c in j["cells"]) for j in items):
        raise HarnessError(f"{cdir.path / JOBS} does not hold a list of jobs", "the campaign folder was damaged")
    return [Job(j["job"], tuple(j["cells"])) for j in items]


def _run(argv: list[str]) -> str:
    res = proc.run(argv, timeout=TIMEOUT, check=False)
    if not res.ok:
        err = (res.stderr.strip().splitlines() or ["(no message)"])[-1][:200]
        raise HarnessError(f"{argv[0]} failed: {err}", "check the cluster (sinfo) and the campaign's [slurm] table")
    return res.stdout


def constraint(opts: SlurmOptions, pair: str) -> str:
    """The campaign's constraint, and the pair's feature with it (spec.py: then both are features and &)."""
    return "&".join(x for x in (opts.constraint, pair) if x)


def submit(cdir: CampaignDir, cells: list[str], opts: SlurmOptions, pair: str = "") -> Job:
    """One job array over `cells` (runs), on the nodes of `pair`'s feature if given, recorded in the
    campaign folder as soon as sbatch names it."""
    if "%" in str(cdir.path.resolve()):
        raise HarnessError(f"--out {cdir.path} holds '%', which Slurm reads in a log's name", "name another folder")
    known = jobs(cdir)
    slurm = cdir.folder.folder("slurm")
    slurm.write("element.sh", ELEMENT.format(python=shlex.quote(sys.executable)).encode())
    rel = f"slurm/submit-{len(known) + 1}.json"
    slurm.write(rel.removeprefix("slurm/"), (json.dumps({"cells": cells}, indent=2) + "\n").encode())
    logs = cdir.path.resolve() / "slurm"
    argv = ["sbatch", "--parsable", f"--array=0-{len(cells) - 1}", "--nodes=2", "--exclusive",
            "--job-name=vmharness-campaign", f"--output={logs}/%A_%a.out"]
    argv += [f"--constraint={constraint(opts, pair)}"] * bool(constraint(opts, pair))
    argv += [f"--partition={opts.partition}"] * bool(opts.partition)
    argv += [str(logs / "element.sh"), str(cdir.path.resolve()), rel]
    out = _run(argv).strip().split(";")[0]
    if not out.isdigit():
        raise HarnessError(f"sbatch printed {out[:60]!r}, not a job id", "check the cluster's sbatch")
    job = Job(int(out), tuple(cells))
    record = {"jobs": [{"job": j.job, "cells": list(j.cells)} for j in [*known, job]]}
    slurm.write("jobs.json", (json.dumps(record, indent=2) + "\n").encode())
    return job


def _number(v: Any) -> int | None:
    """An id as 22.05 writes it (a number) or 23.02 on ({"set": true, "number": N})."""
    if isinstance(v, dict):
        v = v.get("number") if v.get("set", True) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _tasks(text: str) -> list[int]:
    """squeue's array_task_string for pending elements: "0-3,5" (with "%N", a limit, after it)."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or len(out) > 100_000:
            return out
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def queued(text: str) -> dict[tuple[int, int], str]:
    """(array job, element) -> its state (PENDING, RUNNING, ...), from `squeue --json`'s text."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HarnessError(f"squeue --json printed no JSON ({str(exc)[:80]})", "check squeue on this machine") from exc
    meta = data.get("meta") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("Slurm", meta.get("slurm")), dict):
        raise HarnessError("squeue --json printed JSON without Slurm's meta table", "check squeue on this machine")
    items = data.get("jobs")
    if not isinstance(items, list):
        raise HarnessError("squeue --json printed no list of jobs", "check squeue on this machine")
    out: dict[tuple[int, int], str] = {}
    for j in items:
        if not isinstance(j, dict):
            raise HarnessError("squeue --json printed a job that is not an object", "check squeue on this machine")
        array, task = _number(j.get("array_job_id")), _number(j.get("array_task_id"))
        state = j.get("job_state")
        state = state[0] if isinstance(state, list) and state else state  # 23.02 on: a list of flags
        if array is None or not isinstance(state, str):
            continue  # not an element of an array: none of the campaign's
        string = j.get("array_task_string")
        for t in [task] if task is not None else _tasks(string) if isinstance(string, str) else []:
            out[(array, t)] = state[:20]
    return out


def squeue() -> dict[tuple[int, int], str]:
    return queued(_run(["squeue", "--json"]))


def cell_jobs(cdir: CampaignDir, q: dict[tuple[int, int], str]) -> dict[str, str]:
    """cell -> the state of its element still in the queue (pending, running, ...): squeue also shows
    elements that ended a few minutes ago (COMPLETED, CANCELLED, FAILED): those are the folders' to say."""
    out: dict[str, str] = {}
    for job in jobs(cdir):
        for i, name in enumerate(job.cells):
            if q.get((job.job, i)) in ACTIVE:
                out[name] = q[(job.job, i)].lower()
    return out


def allocation() -> tuple[str, str]:
    """The element's two nodes, server and client (`scontrol show hostnames $SLURM_JOB_NODELIST`)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        raise HarnessError("SLURM_JOB_NODELIST is not set", "run-cell is run by the campaign's Slurm job")
    names = _run(["scontrol", "show", "hostnames", nodelist]).split()
    if len(names) < 2:
        raise HarnessError(f"the allocation has {len(names)} node(s), not 2", "submit with --nodes=2")
    return check_host(names[0], "the server node"), check_host(names[1], "the client node")


def cancel(cdir: CampaignDir, only: list[int]) -> list[int]:
    """scancel the campaign's jobs (or those of `only`, each of which must be the campaign's)."""
    mine = [j.job for j in jobs(cdir)]
    for j in only:
        if j not in mine:
            raise HarnessError(f"job {j} is not one of this campaign's",
                               f"its jobs: {', '.join(map(str, mine)) or 'none'}")
    chosen = only or mine
    if chosen:
        _run(["scancel", *map(str, chosen)])
    return chosen
