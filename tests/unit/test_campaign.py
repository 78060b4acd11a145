"""The campaign's parts without a cluster: the matrix's cells and their names, a cell's configuration
written as TOML and read back by bench's own loader, squeue's JSON as Slurm 22.05 and 23.02 write it,
and a cell's state from its folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmharness.campaign import slurm, spec, tomlout
from vmharness.campaign.folder import CampaignDir
from vmharness.campaign.state import cell_state
from vmharness.errors import HarnessError
from vmharness.model import config

CAMPAIGN = """[campaign]
command = "bench"
[base.server]
listen = "127.0.0.1:18999"
url = "http://127.0.0.1:18999/"
[[base.instance]]
name = "base"
[[base.instance]]
name = "other"
[[axis]]
key = "sweep.duration"
values = [1, 2]
[[axis]]
key = "instance.1.filesize_note"
values = ["x"]
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "c.toml").write_text(text)
    return tmp_path / "c.toml"


def test_cells_are_the_product_named_by_their_values(tmp_path: Path) -> None:
    text = CAMPAIGN.replace("instance.1.filesize_note", "server.workers").replace('["x"]', "[1, 4]")
    c = spec.load(write(tmp_path, text))
    assert [cell.name for cell in c.cells] == ["0000-duration-1_workers-1", "0001-duration-1_workers-4",
                                               "0002-duration-2_workers-1", "0003-duration-2_workers-4"]
    assert c.cells[3].values == {"sweep.duration": 2, "server.workers": 4}
    assert c.cells[3].table["sweep"] == {"duration": 2} and c.cells[0].table["server"]["workers"] == 1
    assert c.baseline == c.cells[0].name


def test_an_array_of_tables_is_indexed_and_its_key_checked(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"cell 0000-duration-1_filesize_note-x: unknown setting "
                                           r"config\.instance\[1\]\.filesize_note"):
        spec.load(write(tmp_path, CAMPAIGN))
    with pytest.raises(HarnessError, match="instance has 2 tables: no 5"):
        spec.load(write(tmp_path, CAMPAIGN.replace("instance.1.filesize_note", "instance.5.name")))


def test_a_cells_configuration_reads_back_through_benchs_loader(tmp_path: Path) -> None:
    text = CAMPAIGN.replace("instance.1.filesize_note", "instance.1.nginx").replace(
        '["x"]', '["/opt/nginx \\"quoted\\" \u00e9", "nginx"]')
    c = spec.load(write(tmp_path, text))
    for cell in c.cells:
        (tmp_path / "cell.toml").write_text(tomlout.dumps(cell.table))
        assert config.load(tmp_path / "cell.toml") == config.bench_from_table(cell.table)
    assert config.load(tmp_path / "cell.toml").instance[1].name == "other"


def test_toml_of_tables_and_values() -> None:
    import tomllib

    table = {"a": [[1], []], "t": [{"x": {"y": 1}, "z": 2}], "s": "a \"q\" \u00e9\n"}
    assert tomllib.loads(tomlout.dumps(table)) == table
    with pytest.raises(HarnessError, match=r"^t\.0\.x\.y is nan: not a number"):
        tomlout.dumps({"t": [{"x": {"y": float("nan")}}]})
    with pytest.raises(HarnessError, match="holds a value TOML cannot"):
        tomlout.dumps({"a": object()})


SQUEUE_22 = {"meta": {"plugin": {"type": "openapi/v0.0.38"}, "Slurm": {"release": "22.05.8"}}, "jobs": [
    {"job_id": 2, "array_job_id": 1, "array_task_id": 0, "array_task_string": "", "job_state": "RUNNING"},
    {"job_id": 1, "array_job_id": 1, "array_task_id": None, "array_task_string": "1-3%2", "job_state": "PENDING"},
    {"job_id": 9, "array_job_id": 0, "array_task_id": None, "job_state": "RUNNING"}]}
SQUEUE_23 = {"meta": {"slurm": {"release": "23.11.4"}}, "jobs": [
    {"job_id": 2, "array_job_id": {"set": True, "number": 1}, "array_task_id": {"set": True, "number": 0},
     "job_state": ["RUNNING"]},
    {"job_id": 1, "array_job_id": {"set": True, "number": 1}, "array_task_id": {"set": False, "number": 0},
     "array_task_string": "1-3", "job_state": ["PENDING"]}]}


@pytest.mark.parametrize("data", [SQUEUE_22, SQUEUE_23], ids=["22.05", "23.02+"])
def test_squeue_json_of_either_schema(data: dict[str, object]) -> None:
    got = slurm.queued(json.dumps(data))
    assert {k: v for k, v in got.items() if k[0] == 1} == {(1, 0): "RUNNING", (1, 1): "PENDING", (1, 2): "PENDING",
                                                           (1, 3): "PENDING"}


def test_cell_state_from_its_folders(tmp_path: Path) -> None:
    c = spec.load(write(tmp_path, CAMPAIGN.replace("instance.1.filesize_note", "server.workers").replace(
        '["x"]', "[1]")))
    cdir = CampaignDir.write(tmp_path / "camp", c)
    name = c.cells[0].name
    assert cell_state(cdir, name).state == "missing"
    cdir.write_json(name, "exit.json", {"code": 2, "why": "error: \x1b[2Jwrk is not there"})
    got = cell_state(cdir, name)
    assert (got.state, got.why) == ("failed", "exit 2: error: \\x1b[2Jwrk is not there")
    run = tmp_path / "camp/runs" / name
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"kind": "bench", "config": {"instance": [{"name": "b"}]},
                                                   "ended": "2026-01-01T00:00:00Z", "tally": {"failed": 0}}))
    cdir.write_json(name, "exit.json", {"code": 0, "why": ""})
    assert cell_state(cdir, name).state == "done"
    (run / "manifest.json").write_text("{")
    assert cell_state(cdir, name).state == "failed"
    with pytest.raises(HarnessError, match="holds another campaign"):
        CampaignDir.write(tmp_path / "camp", spec.load(write(tmp_path, CAMPAIGN.replace(
            "instance.1.filesize_note", "server.workers").replace('["x"]', "[2]"))))


def recorded(tmp_path: Path, cells: int, why: str) -> tuple[CampaignDir, list[str]]:
    """A campaign folder of `cells` cells: the first two done (their run folders the recorded bench run,
    on node1 and node2), the third failed with `why`, the rest missing."""
    import tarfile

    values = ", ".join(str(v) for v in range(1, cells + 1))
    c = spec.load(write(tmp_path, CAMPAIGN.replace("instance.1.filesize_note", "server.workers").replace(
        '["x"]', "[1]").replace("values = [1, 2]", f"values = [{values}]")))
    cdir = CampaignDir.write(tmp_path / "camp", c)
    names = [cell.name for cell in c.cells]
    for name in names[:2]:
        with tarfile.open(Path(__file__).parent / "golden/runs/bench.tar.xz") as tar:
            tar.extractall(tmp_path / "camp/runs" / name, filter="data")
        cdir.write_json(name, "nodes.json", {"server": "node1", "client": "node2", "job": "7_0"})
    cdir.write_json(names[2], "exit.json", {"code": 2, "why": why})
    return cdir, names


def test_report_over_every_cell_done_failed_and_missing(tmp_path: Path) -> None:
    """Two cells whose run folders are the recorded bench run: done, the second's change against the
    first 0 with its interval, the nodes each ran on; a failed cell with why (markup kept as text in
    Markdown), a missing one; text, Markdown, CSV."""
    from vmharness.campaign import gather

    cdir, names = recorded(tmp_path, 4, "error: | <b>x</b> |")
    _, plan = CampaignDir.open(tmp_path / "camp")
    rep = gather.build(cdir, plan)
    rows = {r["cell"]: r for r in rep["rows"]}
    assert [rows[n]["state"] for n in names] == ["done", "done", "failed", "missing"]
    assert rows[names[1]]["throughput_change"] == pytest.approx(0, abs=1e-9)
    assert rows[names[1]]["change_low"] < 0 < rows[names[1]]["change_high"]
    assert rows[names[0]]["requests_per_s"] > 0 and (rows[names[0]]["server"], rows[names[0]]["client"]) == \
        ("node1", "node2")
    assert rep["counts"] == {"done": 2, "failed": 1, "missing": 1}
    text = gather.text(rep)
    assert "node1/node2" in text and "exit 2: error: | <b>x</b> |" in text
    md = gather.markdown(rep)
    assert "<b>" not in md and md.count("\n|") >= 5
    assert gather.csv(rep).splitlines()[0].startswith("cell,instance,state,requests_per_s")


def test_a_slurm_cells_clients_are_its_second_node(tmp_path: Path) -> None:
    """client = "node": every [[client]] of the cell becomes the allocation's second node, in a copy of
    the cell's configuration that bench's loader reads; a node name that could be an ssh option is refused."""
    from vmharness.campaign import runner

    text = CAMPAIGN.replace("instance.1.filesize_note", "server.workers").replace('["x"]', "[1]")
    c = spec.load(write(tmp_path, text + '[[base.client]]\nthreads = 1\n[[base.client]]\nhost = "a"\n'))
    cdir = CampaignDir.write(tmp_path / "camp", c)
    name = c.cells[0].name
    got = config.load(runner._config(cdir, name, "node2"))
    assert [(cl.host, cl.threads) for cl in got.client] == [("node2", 1), ("node2", 0)]
    assert runner._config(cdir, name, None) == tmp_path / "camp/cells" / name / "config.toml"
    with pytest.raises(HarnessError, match="the client node '-oProxyCommand=x' is not a host"):
        runner._config(cdir, name, "-oProxyCommand=x")


def test_pairs_gather_each_pairs_cells() -> None:
    from vmharness.campaign import gather

    row = {"state": "done", "instance": "b", "server": "n1", "client": "n2", "throughput_change": 0.1}
    rows = [{**row, "cell": "a"}, {**row, "cell": "b", "throughput_change": -0.3},
            {**row, "cell": "c", "server": "n3", "client": "n4"}, {**row, "cell": "d", "state": "failed"}]
    assert gather.pairs(rows) == [
        {"server": "n1", "client": "n2", "cells": ["a", "b"], "median_change": pytest.approx(-0.1)},
        {"server": "n3", "client": "n4", "cells": ["c"], "median_change": 0.1}]


def test_a_run_campaigns_cells_pass_runs_own_rules(tmp_path: Path) -> None:
    """command = "run": each cell is checked by run's validator, rules that span settings included."""
    from vmharness import data

    text = (f'[campaign]\ncommand = "run"\nbase = "{data.DEFAULT_RUN}"\n[[axis]]\nkey = "guest.memory"\n'
            'values = [1024, 2048]\n[[axis]]\nkey = "instance.0.cmdline"\nvalues = ["", "mitigations=off"]\n')
    with pytest.raises(HarnessError, match=r"cell 0001-memory-1024_cmdline-mitigations-off: study\.switches: "
                                           "the reference on turns every mitigation off"):
        spec.load(write(tmp_path, text))
    c = spec.load(write(tmp_path, text.replace(', "mitigations=off"', "")))
    assert [cell.table["guest"]["memory"] for cell in c.cells] == [1024, 2048]


PAIRED = CAMPAIGN.replace("instance.1.filesize_note", "server.workers").replace('["x"]', "[1]").replace(
    'command = "bench"', 'command = "bench"\nbackend = "slurm"\nrepeats = 5\nseed = 7') + \
    '[slurm]\nconstraint = "vfio&mlx5"\npairs = ["pair1", "pair2"]\n'


def test_repetitions_are_blocked_by_pair_in_a_seeded_order() -> None:
    """Every round of as many runs as pairs has each cell once on each pair (the last, short one on a
    random part of them); a cell's runs are spread over the pairs; the same seed gives the same design."""
    from vmharness.campaign import design

    cells = ["0000-a", "0001-b", "0002-c"]
    runs = design.runs(cells, 5, ["p1", "p2"], 7)
    assert len(runs) == 15 and len({r.name for r in runs}) == 15 and runs[0].name.startswith("000")
    for k in range(2):  # two full rounds: each cell once on each pair
        block = runs[6 * k:6 * k + 6]
        assert sorted((r.cell, r.pair) for r in block) == sorted((c, p) for c in cells for p in ("p1", "p2"))
        assert {r.repeat for r in block} == {2 * k, 2 * k + 1}
    assert sorted((r.cell, r.repeat) for r in runs[12:]) == [(c, 4) for c in cells]
    assert {r.cell: r.name for r in runs if r.repeat == 4} == {c: f"{c}-r4" for c in cells}
    assert design.runs(cells, 5, ["p1", "p2"], 7) == runs and design.runs(cells, 5, ["p1", "p2"], 8) != runs
    orders = {tuple(r.pair for r in runs if r.cell == c and r.repeat < 4) for c in cells}
    assert len(orders) > 1  # which pair comes first is drawn, not always the first named
    assert [(r.name, r.pair) for r in design.runs(cells, 1, [], 7)] == [(c, "") for c in cells]


def test_a_paired_campaign_submits_one_array_per_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The design is written into campaign.json, each run a folder with its cell's configuration; submit
    makes one job array per pair with --constraint=CONSTRAINT&PAIR, each holding that pair's runs."""
    from vmharness.cli.main import main

    calls: list[list[str]] = []

    def sbatch(argv: list[str]) -> str:
        calls.append(argv)
        return f"{40 + len(calls)}\n"

    monkeypatch.setattr(slurm, "_run", sbatch)
    assert main(["campaign", "submit", str(write(tmp_path, PAIRED)), "--out", str(tmp_path / "camp")]) == 0
    plan = json.loads((tmp_path / "camp/campaign.json").read_text())
    assert (plan["repeats"], plan["seed"], plan["slurm"]["pairs"]) == (5, 7, ["pair1", "pair2"])
    assert len(plan["runs"]) == 10 and all((tmp_path / "camp/cells" / r["name"] / "config.toml").is_file()
                                           for r in plan["runs"])
    constraints = [next(x for x in a if x.startswith("--constraint=")) for a in calls]
    assert sorted(constraints) == ["--constraint=vfio&mlx5&pair1", "--constraint=vfio&mlx5&pair2"]
    for argv, job, said in zip(calls, slurm.jobs(CampaignDir(tmp_path / "camp")), constraints, strict=True):
        mine = [r["name"] for r in plan["runs"] if r["pair"] == said.rsplit("&", 1)[1]]
        assert list(job.cells) == mine and f"--array=0-{len(mine) - 1}" in argv
        assert argv[-1] == f"slurm/submit-{job.job - 40}.json"
    assert sorted(len(j.cells) for j in slurm.jobs(CampaignDir(tmp_path / "camp"))) == [4, 6]  # 2 rounds and a half
    assert "runs on pair pair1" in capsys.readouterr().out


def test_a_repeated_cells_report_has_a_row_per_run_and_its_pair_effect(tmp_path: Path) -> None:
    """Every run of a repeated cell is a row with its repetition and pair; a cell on two pairs has a
    pair-effect entry (here every run is the same recorded run: no spread within a pair, said so);
    the report says the pairs were controlled."""
    import tarfile

    from vmharness.campaign import gather

    c = spec.load(write(tmp_path, PAIRED.replace("repeats = 5", "repeats = 4")))
    cdir = CampaignDir.write(tmp_path / "camp", c)
    _, plan = CampaignDir.open(tmp_path / "camp")
    for run in plan["runs"]:
        with tarfile.open(Path(__file__).parent / "golden/runs/bench.tar.xz") as tar:
            tar.extractall(tmp_path / "camp/runs" / run["name"], filter="data")
    rep = gather.build(cdir, plan)
    assert sorted((r["run"], r["cell"], r["repeat"], r["pair"]) for r in rep["rows"]) == sorted(
        (r["name"], r["cell"], r["repeat"], r["pair"]) for r in plan["runs"])
    assert len(rep["rows"]) == 8 and all(r["state"] == "done" for r in rep["rows"])
    assert [e["cell"] for e in rep["pair_effects"]] == [cell.name for cell in c.cells]
    assert all("no spread within a pair" in e["note"] for e in rep["pair_effects"])
    assert all(p["change"] == pytest.approx(0) for p in rep["pair_effects"][1]["pairs"])
    assert "node pairs controlled" in rep["notes"][0] and "pair effect" in gather.text(rep)
    assert "no spread within a pair" in gather.markdown(rep)
    assert gather.csv(rep).splitlines()[0].endswith("run,repeat,pair,pair_change,pair_effect_p")


def test_pairs_name_no_run_of_a_local_campaign(tmp_path: Path) -> None:
    """`submit --backend local` of a paired campaign: every run is on this machine, so none is labelled
    with a pair it did not have (the report would else compare a machine with itself)."""
    import dataclasses

    c = dataclasses.replace(spec.load(write(tmp_path, PAIRED)), backend="local")
    CampaignDir.write(tmp_path / "camp", c)
    _, plan = CampaignDir.open(tmp_path / "camp")
    assert len(plan["runs"]) == 10 and {r["pair"] for r in plan["runs"]} == {""} and plan["slurm"]["pairs"] == []


def test_one_value_twice_is_two_cells_only_when_named_apart(tmp_path: Path) -> None:
    """An A/A pair (one configuration as two cells) is asked for by naming the two; unnamed, the second
    value is taken for a slip and refused."""
    text = CAMPAIGN.replace("instance.1.filesize_note", "server.workers")
    named = text.replace('values = ["x"]', 'values = [2, 2]\nnames = ["a", "b"]')
    assert [c.name for c in spec.load(write(tmp_path, named)).cells][:2] == ["0000-duration-1_workers-a",
                                                                           "0001-duration-1_workers-b"]
    with pytest.raises(HarnessError, match=r"axis 2.values gives '2' twice"):
        spec.load(write(tmp_path, text.replace('values = ["x"]', 'values = [2, 2]')))
