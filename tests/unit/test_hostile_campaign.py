"""Hostile campaigns (vmharness/campaign/, docs/safety.md "Campaigns"), each run for real through
`vmharness campaign` (tests/hostile_kit.py): a campaign file's axes and Slurm table, and a campaign folder's
records and squeue's JSON, are data. Each is refused with one error naming the cell or key, exit 2, and
nothing written anywhere; a Slurm command the campaign must not run (scancel of an unknown job, an
element of a submission file outside the folder) would create the PWNED canary here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import hostile_kit
from tests.hostile_kit import PWNED, Build, Case, both, with_file

BASE = """[campaign]
command = "bench"
{head}
[base.sweep]
connections = "2"
duration = 1
{slurm}
"""


def campaign(axes: str, head: str = "", slurm: str = "") -> Build:
    return with_file("c.toml", BASE.format(head=head, slurm=slurm) + axes)


def axis(key: str, values: str, names: str = "") -> str:
    return f'\n[[axis]]\nkey = "{key}"\nvalues = {values}\n' + (f"names = {names}\n" if names else "")


def tool(name: str, script: str) -> Build:
    """A stand-in for a Slurm command, found first on PATH (bin/ of the case's folder)."""
    def build(cwd: Path) -> None:
        path = cwd / "bin" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("#!/bin/sh\n" + script + "\n")
        path.chmod(0o755)
    return build


PATH = {"PATH": f"bin:{os.environ.get('PATH', '/usr/bin:/bin')}"}
PLAN = {"command": "bench", "backend": "slurm", "baseline": "0000-duration-1",
        "slurm": {"constraint": "", "partition": "", "client": "node"},
        "cells": [{"name": "0000-duration-1", "values": {"sweep.duration": 1}}]}
FOLDER = both(with_file("camp/campaign.json", json.dumps(PLAN)),
              with_file("camp/slurm/jobs.json", json.dumps({"jobs": [{"job": 5, "cells": ["0000-duration-1"]}]})),
              tool("scancel", f"touch {PWNED}"))
META = '"meta": {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}}}'

CASES = [
    Case("axis-no-values", ("campaign", "plan", "c.toml"), ("axis 1", "sweep.duration", "has no values"),
         campaign(axis("sweep.duration", "[]"))),
    Case("cell-name-path", ("campaign", "plan", "c.toml"), ("axis 1.names", "'../../etc'", "not a name for a folder"),
         campaign(axis("sweep.duration", "[1, 2]", '["../../etc", "b"]'))),
    Case("value-twice", ("campaign", "plan", "c.toml"), ("axis 1.values", "'2' twice", "entries 1 and 3"),
         campaign(axis("sweep.duration", "[2, 1, 2]"))),
    Case("name-twice", ("campaign", "plan", "c.toml"), ("axis 1.names", "'a' twice"),
         campaign(axis("sweep.duration", "[1, 2]", '["a", "a"]'))),
    Case("value-twice-of-a-table", ("campaign", "plan", "c.toml"), ("axis 1.values", "twice", "entries 1 and 2"),
         campaign(axis("sweep", '[{duration = 1, wait = 0}, {wait = 0, duration = 1}]'))),
    # a cell whose run kexecs its host ends the Slurm job holding the node, or the local submit
    Case("host-boots-in-a-cell", ("campaign", "plan", "c.toml"),
         ("cell 0000-duration-1", "reboots the host between host boots"),
         with_file("c.toml", '[campaign]\ncommand = "run"\n[[base.host_boot]]\nname = "v2off"\n'
                   'cmdline = "spectre_v2=off"\n[[base.instance]]\nname = "a"\n[[base.instance]]\nname = "b"\n'
                   'host_boot = "v2off"\n' + axis("sweep.duration", "[1]"))),
    Case("million-cells", ("campaign", "plan", "c.toml"), ("1,000,000 cells", "at most 10,000"),
         campaign(axis("sweep.duration", str(list(range(1, 1001)))) + axis("sweep.wait", str(list(range(1000)))))),
    Case("constraint-shell", ("campaign", "plan", "c.toml"), ("slurm.constraint", "holds a character"),
         campaign(axis("sweep.duration", "[1]"), slurm=f'[slurm]\nconstraint = "vfio;touch {PWNED}"')),
    Case("constraint-blank", ("campaign", "plan", "c.toml"), ("slurm.constraint", "holds a character"),
         campaign(axis("sweep.duration", "[1]"), slurm='[slurm]\nconstraint = "vfio $(id)"')),
    Case("unknown-key", ("campaign", "plan", "c.toml"), ("cell 0000-durashun-1", "config.sweep.durashun"),
         campaign(axis("sweep.durashun", "[1]"))),
    Case("bad-cell", ("campaign", "plan", "c.toml"), ("cell 0001-duration-0", "config.sweep.duration"),
         campaign(axis("sweep.duration", "[1, 0]"))),
    Case("key-into-value", ("campaign", "plan", "c.toml"), ("sweep.duration is a value",),
         campaign(axis("sweep.duration.x", "[1]"))),
    Case("key-not-a-key", ("campaign", "plan", "c.toml"), ("axis 1.key", "not a key"),
         campaign(axis("../sweep", "[1]"))),
    Case("unknown-table", ("campaign", "plan", "c.toml"), ("unknown table 'matrix'",),
         with_file("c.toml", BASE.format(head="", slurm="") + "[matrix]\nx = 1\n")),
    Case("unknown-backend", ("campaign", "plan", "c.toml"), ("campaign.backend", "local or slurm"),
         campaign(axis("sweep.duration", "[1]"), head='backend = "pbs"')),
    Case("out-not-ours", ("campaign", "submit", "c.toml", "--out", "mine"), ("--out mine", "did not make"),
         both(campaign(axis("sweep.duration", "[1]")), with_file("mine/notes.txt", "mine"))),
    Case("host-root", ("campaign", "plan", "c.toml", "--host-root", "snap"), ("--host-root",),
         campaign(axis("sweep.duration", "[1]"))),
    Case("squeue-damaged", ("campaign", "status", "camp"), ("squeue --json printed no JSON",),
         both(FOLDER, tool("squeue", "echo '{\"meta\": {'")), env=PATH),
    Case("squeue-no-meta", ("campaign", "status", "camp"), ("without Slurm's meta",),
         both(FOLDER, tool("squeue", "echo '{\"jobs\": []}'")), env=PATH),
    Case("squeue-jobs-not-list", ("campaign", "status", "camp"), ("no list of jobs",),
         both(FOLDER, tool("squeue", "cat <<'EOF'\n{" + META + ', "jobs": 3}\nEOF')), env=PATH),
    Case("cancel-unknown-job", ("campaign", "cancel", "camp", "--job", "77"), ("job 77 is not one of this campaign's",),
         FOLDER, env=PATH),
    Case("jobs-damaged", ("campaign", "cancel", "camp"), ("jobs.json", "does not hold a list of jobs"),
         both(FOLDER, with_file("camp/slurm/jobs.json", '{"jobs": [{"job": "5; rm -rf /"}]}')), env=PATH),
    Case("plan-damaged", ("campaign", "report", "camp"), ("campaign.json", "does not hold a campaign's cells"),
         with_file("camp/campaign.json", json.dumps({**PLAN, "cells": [{"name": "../x", "values": {}}]}))),
    Case("repeats-zero", ("campaign", "plan", "c.toml"), ("campaign.repeats is 0", "1 to 1,000"),
         campaign(axis("sweep.duration", "[1]"), head="repeats = 0")),
    Case("repeats-negative", ("campaign", "plan", "c.toml"), ("campaign.repeats is -3", "1 to 1,000"),
         campaign(axis("sweep.duration", "[1]"), head="repeats = -3")),
    Case("repeats-million", ("campaign", "plan", "c.toml"), ("campaign.repeats is 1000000", "1 to 1,000"),
         campaign(axis("sweep.duration", "[1]"), head="repeats = 1000000")),
    Case("repeats-not-a-number", ("campaign", "plan", "c.toml"), ("campaign.repeats must be a whole number",),
         campaign(axis("sweep.duration", "[1]"), head='repeats = "3; rm -rf /"')),
    Case("repeats-too-many-runs", ("campaign", "plan", "c.toml"), ("10,100 runs", "101 cells", "at most 10,000"),
         campaign(axis("sweep.duration", str(list(range(1, 102)))), head="repeats = 100")),
    Case("pair-shell", ("campaign", "plan", "c.toml"), ("slurm.pairs", "'pair1;touch", "not a node feature"),
         campaign(axis("sweep.duration", "[1]"), slurm=f'[slurm]\npairs = ["pair1;touch {PWNED}"]')),
    Case("pair-blank", ("campaign", "plan", "c.toml"), ("slurm.pairs", "not a node feature"),
         campaign(axis("sweep.duration", "[1]"), slurm='[slurm]\npairs = ["pair1 $(id)"]')),
    Case("pair-or", ("campaign", "plan", "c.toml"), ("slurm.pairs", "not a node feature"),
         campaign(axis("sweep.duration", "[1]"), slurm='[slurm]\npairs = ["pair1|pair2"]')),
    Case("pairs-twice", ("campaign", "plan", "c.toml"), ("slurm.pairs names 'pair1' twice",),
         campaign(axis("sweep.duration", "[1]"), slurm='[slurm]\npairs = ["pair1", "pair2", "pair1"]')),
    Case("pairs-not-strings", ("campaign", "plan", "c.toml"), ("slurm.pairs must be a list",),
         campaign(axis("sweep.duration", "[1]"), slurm='[slurm]\npairs = "pair1"')),
    Case("pairs-with-or-constraint", ("campaign", "plan", "c.toml"), ("slurm.constraint 'a|b'", "only by &"),
         campaign(axis("sweep.duration", "[1]"), slurm='[slurm]\nconstraint = "a|b"\npairs = ["pair1"]')),
    Case("plan-run-path", ("campaign", "report", "camp"), ("campaign.json", "does not hold a campaign's cells"),
         with_file("camp/campaign.json", json.dumps({**PLAN, "runs": [
             {"name": "../../x", "cell": "0000-duration-1", "repeat": 0, "pair": ""}]}))),
    Case("plan-run-of-no-cell", ("campaign", "status", "camp"), ("campaign.json", "does not hold a campaign's cells"),
         with_file("camp/campaign.json", json.dumps({**PLAN, "runs": [
             {"name": "0000-duration-1", "cell": "9999-other", "repeat": 0, "pair": ""}]}))),
    Case("plan-run-pair-shell", ("campaign", "status", "camp"), ("campaign.json", "does not hold a campaign's cells"),
         with_file("camp/campaign.json", json.dumps({**PLAN, "runs": [
             {"name": "0000-duration-1", "cell": "0000-duration-1", "repeat": 0, "pair": "p;id"}]}))),
    Case("submission-outside", ("campaign", "run-cell", "camp", "../../etc/passwd", "0"), ("is not a submission",),
         FOLDER, env=PATH),
]

outcomes = hostile_kit.fixture(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_campaign(case: Case, outcomes: hostile_kit.Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])


def test_hostile_campaign_changed_nothing_outside(outcomes: hostile_kit.Outcomes) -> None:
    hostile_kit.check_global(outcomes)
