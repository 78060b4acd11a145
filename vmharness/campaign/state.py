"""Where each cell of a campaign stands, from its folders alone: done (its run folder ended with no
failed point), failed (its command ended badly, or its run ended with failed points: with why), started
(a run folder that never ended: interrupted, or running now), or missing (nothing yet). A run folder is
read through the store's checks (rundir/store.py); a damaged one is a failed cell saying so, never done."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vmharness import textsafe
from vmharness.campaign.folder import CampaignDir
from vmharness.errors import HarnessError
from vmharness.model.hostname import HOST
from vmharness.rundir.store import RunDir

JOB = re.compile(r"[0-9]{1,12}(_[0-9]{1,7})?")


@dataclass(frozen=True)
class CellState:
    name: str
    state: str  # done, failed, started, missing (and, with Slurm, queued or running)
    why: str  # for failed: what went wrong; else ""
    server: str  # the nodes it last ran on ("" if unknown)
    client: str
    job: str


def nodes_of(cdir: CampaignDir, name: str) -> tuple[str, str, str]:
    """server, client, job from the cell's nodes.json: each checked (a host's characters, a job id), else ""."""
    try:
        got = cdir.cell_json(name, "nodes.json") or {}
    except HarnessError:
        return "", "", ""
    server, client, job = (got.get(k) for k in ("server", "client", "job"))
    return (server if isinstance(server, str) and HOST.fullmatch(server) else "",
            client if isinstance(client, str) and HOST.fullmatch(client) else "",
            job if isinstance(job, str) and JOB.fullmatch(job) else "")


def _exit(cdir: CampaignDir, name: str) -> tuple[int | None, str]:
    try:
        got = cdir.cell_json(name, "exit.json") or {}
    except HarnessError as exc:
        return 1, textsafe.line(exc.message)
    code, why = got.get("code"), got.get("why")
    return (code if isinstance(code, int) and not isinstance(code, bool) else None,
            textsafe.line(why)[:200] if isinstance(why, str) else "")


def run_state(run: RunDir) -> tuple[str, str]:
    m: dict[str, Any] = run.manifest
    if not m.get("ended"):
        return "started", ""
    tally = m.get("tally")
    failed = tally.get("failed") if isinstance(tally, dict) else None
    if not isinstance(failed, int) or isinstance(failed, bool) or failed < 0:
        return "failed", "its manifest has no tally of failed points"
    return ("done", "") if failed == 0 else ("failed", f"{failed} point(s) failed")


def cell_state(cdir: CampaignDir, name: str) -> CellState:
    server, client, job = nodes_of(cdir, name)
    code, why = _exit(cdir, name)
    path = cdir.run_path(name)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        state, note = "failed", f"{path} is not a run folder"
    elif path.exists() and (path / "manifest.json").exists():
        try:
            state, note = run_state(RunDir.open(path))
        except HarnessError as exc:
            state, note = "failed", textsafe.line(exc.message)[:200]
    else:
        state, note = "missing", ""
    if state != "done" and code not in (None, 0):
        state, note = "failed", f"exit {code}" + (f": {why}" if why else "") + (f"; {note}" if note else "")
    return CellState(name, state, note, server, client, job)


def states(cdir: CampaignDir, plan: dict[str, Any]) -> list[CellState]:
    """Each run's (a cell's repetition: CampaignDir.open's plan["runs"]), in the order they run."""
    return [cell_state(cdir, r["name"]) for r in plan["runs"]]
