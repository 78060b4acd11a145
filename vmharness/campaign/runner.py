"""Running one cell: the real `vmharness bench` (or `run`) as a subprocess, into the cell's run folder:
`--out` the first time, `--resume` after an interruption, so that it measures only what is missing.
Where it ran is written before it starts (nodes.json), how it ended after (exit.json), its output into
log.txt. The local backend runs each cell not done one after the other; a Slurm element runs one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from vmharness import textsafe, userfile
from vmharness.campaign import tomlout
from vmharness.campaign.folder import CampaignDir
from vmharness.campaign.state import cell_state
from vmharness.errors import HarnessError
from vmharness.model import tomlfile
from vmharness.model.hostname import check_host
from vmharness.progress import Say

UNWIND = 120  # seconds: how long a stopped cell's command has to give back what it took
CELL_TIMEOUT = 7 * 86400  # seconds: a cell's command is stopped after a week (a sweep's own limits are shorter)


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Let the cell's command unwind (SIGTERM: it gives back what it took, its nginx stopped), and
    kill it only if it has not ended after UNWIND seconds: never SIGKILL first, which would leave its
    servers running."""
    child.terminate()
    try:
        child.wait(UNWIND)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _last_error(log: bytes) -> str:
    lines = [ln for ln in log.decode(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return textsafe.line((errors or lines or [""])[-1])[:200]


def _config(cdir: CampaignDir, name: str, client: str | None) -> Path:
    """The cell's configuration file; with `client`, a copy whose every [[client]] is that machine."""
    path = cdir.path / "cells" / name / "config.toml"
    if client is None:
        return path
    table = tomlfile.read(path, HarnessError(f"no configuration {path}", "submit the campaign again"))
    clients = table.get("client") or [{}]
    table["client"] = [{**c, "host": check_host(client, "the client node")} for c in clients]
    return cdir.cell_folder(name).write("config-allocated.toml", tomlout.dumps(table).encode())


def run_cell(cdir: CampaignDir, name: str, command: str, nodes: tuple[str, str], job: str, say: Say,
             clients_are_node: bool = False) -> int:
    """Run cell `name` (a no-op if done) on `nodes` (server, client: recorded); `clients_are_node`: every
    [[client]] becomes the client node (Slurm's second), else the configuration's stay. Returns the
    command's exit status."""
    server, client = nodes
    if cell_state(cdir, name).state == "done":
        say(f"{name}: done already")
        return 0
    cdir.write_json(name, "nodes.json", {"server": server, "client": client, "job": job})
    cdir.write_json(name, "exit.json", {"code": None, "why": "started"})
    run = cdir.run_path(name)
    where = ["--resume", str(run)] if (run / "manifest.json").exists() else \
        [str(_config(cdir, name, client if clients_are_node else None)), "--out", str(run)]
    argv = [sys.executable, "-m", "vmharness.cli", command, *where]
    say(f"{name}: vmharness {command} {' '.join(where)}")
    folder = cdir.cell_folder(name)
    with folder.append("log.txt") as log:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            code = child.wait(CELL_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = 124
            _stop(child)
        except BaseException:  # a signal (scancel signals the whole job, Ctrl-C the whole group), or a bug
            _stop(child)
            raise
    tail = userfile.read_inside(cdir.path, f"cells/{name}/log.txt", 1 << 30)[-8192:]
    cdir.write_json(name, "exit.json", {"code": code, "why": "" if code == 0 else _last_error(tail)})
    say(f"{name}: exit {code}")
    return code


def run_local(cdir: CampaignDir, plan: dict[str, object], say: Say) -> int:
    """Every run (a cell's repetition) not done, one after the other in the design's order, on this
    machine (and the clients its configuration names): one pair; 1 if any failed."""
    runs = plan["runs"]
    assert isinstance(runs, list)
    host = socket.gethostname()
    failed = 0
    for run in runs:
        if cell_state(cdir, run["name"]).state == "done":
            continue
        failed += run_cell(cdir, run["name"], str(plan["command"]), (host, ""), "", say) != 0
    return 1 if failed else 0


def read_submission(cdir: CampaignDir, rel: str, index: int) -> str:
    """The cell that array element `index` of the submission file `rel` (slurm/submit-N.json) runs."""
    from vmharness.campaign.folder import read_json
    if not rel.startswith("slurm/submit-") or "/" in rel.removeprefix("slurm/"):
        raise HarnessError(f"{rel!r} is not a submission of the campaign", "the element script passes it")
    got = read_json(cdir.path, rel)
    cells = got.get("cells") if isinstance(got, dict) else None
    if not isinstance(cells, list) or not 0 <= index < len(cells) or not isinstance(cells[index], str):
        raise HarnessError(f"{cdir.path / rel} has no cell {index}", "the submission was damaged: submit again")
    return str(cells[index])
