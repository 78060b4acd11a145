"""The campaign folder, the harness's own (system/owned.py, owner "campaign"):

    campaign.json          the cells (name, values), the runs (each cell's repetitions, their pairs and
                           order: design.py) and how they run, written by the first submit
    cells/NAME/config.toml each run's configuration (its cell's), checked (spec.expand)
    cells/NAME/nodes.json  where the cell last ran (server, client, Slurm job), written as it starts
    cells/NAME/exit.json   how the cell's command last ended (its exit status, its last error line)
    cells/NAME/log.txt     the command's output
    runs/NAME/             the cell's run folder, made by `vmharness bench` or `run` itself
    slurm/                 the element script, each submission's cells, jobs.json (the job ids)

Everything read back from it is data: each file is read as a regular file inside the folder (no link),
with a size cap, and its values checked before they are used."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness import userfile
from vmharness.campaign import design, tomlout
from vmharness.campaign.spec import CELL, FEATURE, Campaign
from vmharness.errors import HarnessError
from vmharness.rundir import jsontext
from vmharness.system import owned

OWNER = "campaign"
CAMPAIGN = "campaign.json"
MAX_JSON = 16 << 20  # bytes: 10,000 cells' names and values


def _hint(path: Path) -> str:
    return f"{path} is not a campaign folder vmharness wrote (or it was damaged): name another --out"


def read_json(folder: Path, rel: str) -> Any | None:
    """A JSON file inside `folder`, or None if absent; damage is an error naming the file."""
    try:
        data = userfile.read_inside(folder, rel, MAX_JSON, _hint(folder))
    except FileNotFoundError:
        return None
    try:
        return jsontext.value(data.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HarnessError(f"{folder / rel} is not JSON: {str(exc)[:120]}", _hint(folder)) from exc


def _plan(c: Campaign) -> dict[str, Any]:
    pairs = c.slurm.pairs if c.backend == "slurm" else ()  # this machine is one pair: no run is labelled another
    return {"command": c.command, "backend": c.backend, "baseline": c.baseline, "repeats": c.repeats, "seed": c.seed,
            "slurm": {"constraint": c.slurm.constraint, "partition": c.slurm.partition, "client": c.slurm.client,
                      "pairs": list(pairs)},
            "cells": [{"name": cell.name, "values": cell.values} for cell in c.cells],
            "runs": [r.json() for r in design.runs([cell.name for cell in c.cells], c.repeats, pairs, c.seed)]}


def _runs(plan: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The plan's runs, checked: each a folder's name, of one of its cells, a pair a feature or "";
    a plan written before cells were repeated has none: each cell is then its one run."""
    names = [c["name"] for c in plan["cells"]]
    runs = plan.get("runs", [{"name": n, "cell": n, "repeat": 0, "pair": ""} for n in names])
    ok = isinstance(runs, list) and all(
        isinstance(r, dict) and isinstance(r.get("name"), str) and CELL.fullmatch(r["name"])
        and r.get("cell") in names and isinstance(r.get("repeat"), int) and not isinstance(r.get("repeat"), bool)
        and r["repeat"] >= 0
        and isinstance(r.get("pair"), str) and (r["pair"] == "" or FEATURE.fullmatch(r["pair"])) for r in runs)
    return runs if ok and len({r["name"] for r in runs}) == len(runs) else None


@dataclass(frozen=True)
class CampaignDir:
    path: Path

    @property
    def folder(self) -> owned.Folder:
        return owned.Folder(self.path, str(self.path))

    def cell_folder(self, name: str) -> owned.Folder:
        if not CELL.fullmatch(name):
            raise HarnessError(f"cell name {name[:80]!r} is not a folder's name", _hint(self.path))
        return self.folder.folder("cells").folder(name)

    def run_path(self, name: str) -> Path:
        return self.path / "runs" / name

    @classmethod
    def preflight(cls, path: Path) -> None:
        owned.preflight(path, OWNER, "--out", hint="name a new folder, or the campaign's own")

    @classmethod
    def write(cls, path: Path, c: Campaign) -> CampaignDir:
        """Made (or verified as this campaign's) with every cell's configuration written out; a folder
        of another campaign, or of this one with other cells, is refused."""
        folder = owned.claim(path, OWNER, "--out", hint="name a new folder, or the campaign's own")
        me = cls(path)
        plan = _plan(c)
        said = read_json(path, CAMPAIGN)
        if said is not None and said != json.loads(json.dumps(plan)):
            raise HarnessError(f"--out {path} holds another campaign (its cells or settings differ)",
                               "name a new folder for a changed campaign")
        if said is None:
            folder.write(CAMPAIGN, (json.dumps(plan, indent=2, sort_keys=True) + "\n").encode())
        folder.folder("runs")
        tables = {cell.name: tomlout.dumps(cell.table).encode() for cell in c.cells}
        for run in plan["runs"]:
            me.cell_folder(run["name"]).write("config.toml", tables[run["cell"]])
        return me

    @classmethod
    def open(cls, path: Path) -> tuple[CampaignDir, dict[str, Any]]:
        """A campaign folder to read: its plan checked (names, command, backend)."""
        if not (path / CAMPAIGN).exists():
            raise HarnessError(f"{path} is not a campaign folder (no {CAMPAIGN})",
                               "pass the folder `submit --out` made")
        plan = read_json(path, CAMPAIGN)
        cells = plan.get("cells") if isinstance(plan, dict) else None
        if (not isinstance(plan, dict) or plan.get("command") not in ("bench", "run")
                or plan.get("backend") not in ("local", "slurm") or not isinstance(cells, list)
                or not all(isinstance(c, dict) and isinstance(c.get("name"), str) and CELL.fullmatch(c["name"])
                           and isinstance(c.get("values"), dict) for c in cells)
                or not isinstance(plan.get("baseline"), str) or not isinstance(plan.get("slurm"), dict)
                or _runs(plan) is None):
            raise HarnessError(f"{path / CAMPAIGN} does not hold a campaign's cells", _hint(path))
        return cls(path), {**plan, "runs": _runs(plan)}

    def write_json(self, name: str, rel: str, data: dict[str, Any]) -> None:
        self.cell_folder(name).write(rel, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())

    def cell_json(self, name: str, rel: str) -> dict[str, Any] | None:
        got = read_json(self.path, f"cells/{name}/{rel}")
        return got if isinstance(got, dict) else None
