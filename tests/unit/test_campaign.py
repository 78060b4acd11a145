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


def test_report_over_every_cell_done_failed_and_missing(tmp_path: Path) -> None:
    """Two cells whose run folders are the recorded bench run: done, the second's change against the
    first 0 with its interval, the nodes each ran on; a failed cell with why (markup kept as text in
    Markdown), a missing one; text, Markdown, CSV."""
    import tarfile

    from vmharness.campaign import gather

    c = spec.load(write(tmp_path, CAMPAIGN.replace("instance.1.filesize_note", "server.workers").replace(
        '["x"]', "[1]").replace("values = [1, 2]", "values = [1, 2, 3, 4]")))
    cdir = CampaignDir.write(tmp_path / "camp", c)
    names = [cell.name for cell in c.cells]
    for name in names[:2]:
        with tarfile.open(Path(__file__).parent / "golden/runs/bench.tar.xz") as tar:
            tar.extractall(tmp_path / "camp/runs" / name, filter="data")
        cdir.write_json(name, "nodes.json", {"server": "node1", "client": "node2", "job": "7_0"})
    cdir.write_json(names[2], "exit.json", {"code": 2, "why": "error: | <b>x</b> |"})
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
