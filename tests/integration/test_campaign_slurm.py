"""Campaigns for real: loopback benches (nginx and wrk on this machine) as cells of a Slurm job array on a
one-machine cluster (tests/slurm_cluster.py: four slurmd nodes, two pairs by feature), waited for and
gathered; a cancelled job, a failed cell, `submit` again running only the cells without a complete run;
the local backend's run of the same campaign giving the same cells in its table; a repeated cell's
runs spread over both pairs, one job array per pair; cells whose client is the allocation's second
node, reached over ssh by the name Slurm gives it; and a cell killed mid-way, resumed by the next
`submit`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.netns_host import netns_host
from tests.slurm_cluster import Cluster, cluster, isolated
from vmharness.system import proc
from vmharness.system.machine import SSH_CONFIG_ENV

pytestmark = pytest.mark.integration

WAIT = 300.0  # seconds: a cell takes about 3 here
# One count a cell: what these tests hold is the campaign's (its cells on Slurm, waited for, gathered,
# submitted again), not the sweep's, which tests/integration/test_bench.py holds; a second count (as
# before) measured two more points in each of some twenty cells, about 50 s of the host's stream.


def campaign(port: int, backend: str, wrk_values: str = '["wrk"]', wrk_names: str = '["wrk"]') -> str:
    return f"""[campaign]
command = "bench"
backend = "{backend}"

[slurm]
client = "config"
constraint = "pair1"

[base.server]
listen = "127.0.0.1:{port}"
url = "http://127.0.0.1:{port}/"
workers = 1

[[base.client]]
threads = 1

[base.sweep]
connections = "4"
iterations = 2
duration = 1
wait = 0.2
warmup = 0
retries = 0

[base.load]
percents = []
capacity = 0

[[axis]]
key = "server.filesize"
values = [64, 4096]

[[axis]]
key = "client.0.wrk"
values = {wrk_values}
names = {wrk_names}
"""


def cli(c: Cluster, *args: str, timeout: float = 120) -> proc.Result:
    return proc.run([sys.executable, "-m", "vmharness.cli", "campaign", *args], timeout=timeout, check=False,
                    env=c.env)


def status(c: Cluster, folder: Path) -> dict[str, dict[str, Any]]:
    res = cli(c, "status", str(folder), "--json")
    assert res.returncode in (0, 1), res.stderr
    return {r["run"]: r for r in json.loads(res.stdout)["cells"]}


def wait(c: Cluster, folder: Path, pair: str | None = None, timeout: float = WAIT) -> dict[str, dict[str, Any]]:
    """Until no run (of `pair`, if given) is queued or running, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = status(c, folder)
        if not any(r["state"] in ("pending", "running", "configuring", "completing") for r in got.values()
                   if pair is None or r["pair"] == pair):
            return got
        assert time.monotonic() < deadline, f"the campaign did not end: {got}\n{c.log()}"
        time.sleep(1)


def report(c: Cluster, folder: Path) -> dict[str, Any]:
    res = cli(c, "report", str(folder), "--json", timeout=300)
    assert res.ok, res.stderr
    return dict(json.loads(res.stdout))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def test_four_cells_on_slurm_and_locally_give_one_table(slurm: Cluster, tmp_path: Path) -> None:
    """Four cells as one job array, each element two whole nodes (node1 the server, node2 the client),
    each cell's run folder in the campaign folder; the local backend's run of the campaign has the same
    cells, done, in its table."""
    (tmp_path / "c.toml").write_text(campaign(18741, "slurm", '["wrk", "wrk"]', '["a", "b"]'))
    out = tmp_path / "on-slurm"
    res = cli(slurm, "submit", str(tmp_path / "c.toml"), "--out", str(out))
    assert res.ok, res.stderr
    assert "submitted job" in res.stdout
    got = wait(slurm, out)
    assert {r["state"] for r in got.values()} == {"done"}, (got, slurm.log())
    assert len(got) == 4 and all((r["server"], r["client"]) == ("node1", "node2") for r in got.values())
    jobs = json.loads((out / "slurm/jobs.json").read_text())["jobs"]
    assert [sorted(j["cells"]) for j in jobs] == [sorted(got)]
    on_slurm = report(slurm, out)
    res = cli(slurm, "report", str(out), "--out", str(tmp_path / "report"), timeout=300)  # every form, the page
    assert res.ok, res.stderr
    page = (tmp_path / "report" / "campaign-report.html").read_text()
    assert page.index("<svg") < page.index("<table") and page.count("<tr>") == 1 + len(on_slurm["rows"])
    res = cli(slurm, "submit", str(tmp_path / "c.toml"), "--out", str(out))  # every cell done: nothing again
    assert res.ok and "nothing submitted" in res.stdout, res.stdout + res.stderr

    local = tmp_path / "here"
    res = proc.run(isolated([sys.executable, "-m", "vmharness.cli", "campaign", "submit", str(tmp_path / "c.toml"),
                             "--out", str(local), "--backend", "local"]), timeout=WAIT, check=False, env=slurm.env)
    assert res.ok, res.stderr
    here = report(slurm, local)
    assert [(r["cell"], r["instance"], r["state"]) for r in here["rows"]] == \
        [(r["cell"], r["instance"], r["state"]) for r in on_slurm["rows"]]
    assert all(r["requests_per_s"] for r in here["rows"] + on_slurm["rows"])
    assert here["values"] == on_slurm["values"]


def test_cancel_failed_cell_and_submit_again(slurm: Cluster, tmp_path: Path) -> None:
    """A job cancelled before its cells ran leaves them missing (or started); a cell whose wrk is not
    there fails, with why; `submit` again submits only the cells without a complete run."""
    (tmp_path / "c.toml").write_text(campaign(18742, "slurm", '["wrk", "/nonexistent/wrk"]', '["wrk", "nowrk"]'))
    out = tmp_path / "camp"
    res = cli(slurm, "submit", str(tmp_path / "c.toml"), "--out", str(out))
    assert res.ok, res.stderr
    job = json.loads((out / "slurm/jobs.json").read_text())["jobs"][0]["job"]
    res = cli(slurm, "cancel", str(out), "--job", str(job + 1000))  # not the campaign's: refused
    assert res.returncode == 2 and f"job {job + 1000} is not one of this campaign's" in res.stderr
    res = cli(slurm, "cancel", str(out))
    assert res.ok and str(job) in res.stdout, res.stderr
    first = wait(slurm, out)
    assert {r["state"] for r in first.values()} != {"done"}, first  # the job was cancelled before every cell ran
    left = sorted(n for n, r in first.items() if r["state"] != "done")

    res = cli(slurm, "submit", str(tmp_path / "c.toml"), "--out", str(out))
    assert res.ok, res.stderr
    assert json.loads((out / "slurm/submit-2.json").read_text())["cells"] == left
    second = wait(slurm, out)
    assert {n: r["state"] for n, r in second.items()} == {
        n: "failed" if n.endswith("nowrk") else "done" for n in second}, (second, slurm.log())
    rows = {r["cell"]: r for r in report(slurm, out)["rows"]}
    assert all(r["why"].startswith("exit ") for n, r in rows.items() if n.endswith("nowrk"))

    res = cli(slurm, "submit", str(tmp_path / "c.toml"), "--out", str(out))  # only the failed cells again
    assert res.ok, res.stderr
    assert json.loads((out / "slurm/submit-3.json").read_text())["cells"] == sorted(
        n for n in second if n.endswith("nowrk"))
    wait(slurm, out)


def test_repetitions_spread_over_two_pairs(slurm: Cluster, tmp_path: Path) -> None:
    """Two cells, each run twice: one job array per pair (--constraint=pair1 on node1/node2, pair2 on
    node3/node4), each cell once on each; the report has each cell's runs on both pairs and says a pair
    effect needs more repetitions. The benches share this machine's loopback port, so pair2's nodes are
    drained until pair1's array is through (its array waits for them, as on a busy cluster)."""
    text = campaign(18743, "slurm").replace('constraint = "pair1"', 'pairs = ["pair1", "pair2"]')
    (tmp_path / "c.toml").write_text(text.replace('backend = "slurm"', 'backend = "slurm"\nrepeats = 2'))
    out = tmp_path / "paired"
    nodes = ["scontrol", "update", "NodeName=node[3-4]"]
    assert proc.run([*nodes, "State=DRAIN", "Reason=one-loopback"], timeout=30, check=False, env=slurm.env).ok
    try:
        res = cli(slurm, "submit", str(tmp_path / "c.toml"), "--out", str(out))
        assert res.ok and res.stdout.count("submitted job") == 2, res.stdout + res.stderr
        wait(slurm, out, "pair1")
    finally:
        assert proc.run([*nodes, "State=RESUME"], timeout=30, check=False, env=slurm.env).ok
    got = wait(slurm, out)
    assert {r["state"] for r in got.values()} == {"done"} and len(got) == 4, (got, slurm.log())
    where = {"pair1": ("node1", "node2"), "pair2": ("node3", "node4")}
    assert all((r["server"], r["client"]) == where[r["pair"]] for r in got.values()), got
    assert sorted((r["cell"], r["pair"]) for r in got.values()) == sorted(
        (c, p) for c in {r["cell"] for r in got.values()} for p in where)
    rep = report(slurm, out)
    assert [(e["cell"], [p["pair"] for p in e["pairs"]]) for e in rep["pair_effects"]] == [
        (c, ["pair1", "pair2"]) for c in sorted({r["cell"] for r in got.values()})]
    assert all("too few repetitions" in e["note"] for e in rep["pair_effects"])
    assert "node pairs controlled" in rep["notes"][0]


def test_a_cells_client_is_the_second_node_slurm_gave_it(slurm: Cluster, tmp_path: Path) -> None:
    """`client = "node"`: every [[client]] of a cell becomes the allocation's second node, reached by the
    name Slurm gives it. Here node2 is also a network namespace with an sshd of its own
    (tests/integration/netns_host.py: `Host node2` in the harness's ssh config, VMHARNESS_SSH_CONFIG, which
    the job inherits from `submit`), so each cell's wrk runs there, over ssh, and loads the server on
    node1 (this machine's root namespace) across a veth: the client's own sampler counts packets on its
    side of the wire, and the record names node2 as the machine that loaded it."""
    port = 18744
    with netns_host("node2", 236) as node2:
        text = campaign(port, "slurm").replace('client = "config"', 'client = "node"').replace(
            f'listen = "127.0.0.1:{port}"', f'listen = "{node2.root_address}:{port}"').replace(
            f'url = "http://127.0.0.1:{port}/"', f'url = "http://{node2.root_address}:{port}/"')
        (tmp_path / "c.toml").write_text(text)
        out = tmp_path / "node"
        env = {**slurm.env, SSH_CONFIG_ENV: str(node2.ssh_config)}
        res = proc.run([sys.executable, "-m", "vmharness.cli", "campaign", "submit", str(tmp_path / "c.toml"),
                        "--out", str(out)], timeout=120, check=False, env=env)
        assert res.ok, res.stderr
        got = wait(slurm, out)
        assert {r["state"] for r in got.values()} == {"done"} and len(got) == 2, (got, slurm.log())
        assert all((r["server"], r["client"]) == ("node1", "node2") for r in got.values()), got
    for cell in got:
        allocated = (out / "cells" / cell / "config-allocated.toml").read_text()
        assert 'host = "node2"' in allocated, allocated
        records = [json.loads(line) for line in (out / "runs" / cell / "records.jsonl").read_text().splitlines()]
        points = [r for r in records if r["kind"] == "measurement"]
        assert points and all(r["ok"] for r in points), points
        for point in points:
            assert [d["machine"] for d in point["client"]["clients_detail"]] == ["node2"], point["client"]
            assert point["samples"]["node2"]["net"][node2.interface]["tx_packets_per_s"] > 0, point["samples"]
    rows = report(slurm, out)["rows"]
    assert rows and all(r["requests_per_s"] for r in rows), rows


RESUMED = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
conf, out, cell = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
submit = [sys.executable, "-m", "vmharness.cli", "campaign", "submit", str(conf), "--out", str(out)]
first = subprocess.Popen(submit, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
records, deadline = out / "runs" / cell / "records.jsonl", time.monotonic() + 240
while not (records.exists() and '"kind": "measurement"' in records.read_text()):
    if first.poll() is not None or time.monotonic() > deadline:
        print(json.dumps({"error": f"no point measured before the submit ended ({first.poll()})"}))
        sys.exit(0)
    time.sleep(0.05)
os.killpg(first.pid, signal.SIGKILL)  # the submit and its cell's bench: not their nginx, a session of its own
first.wait()
before = [json.loads(line)["key"] for line in records.read_text().splitlines()
          if json.loads(line)["kind"] == "measurement" and json.loads(line)["ok"]]
left = Path("/run/vmharness/journal.jsonl").exists()
again = subprocess.run(submit, capture_output=True, text=True, timeout=240)
print(json.dumps({"before": before, "journal_left": left, "code": again.returncode, "out": again.stdout,
                  "err": again.stderr[-2000:], "journal_after": Path("/run/vmharness/journal.jsonl").exists()}))
"""


def test_an_interrupted_cell_is_resumed_by_the_next_submit(tmp_path: Path) -> None:
    """The local backend's submit and its cell's bench SIGKILLed after the first point: what the bench took
    is on its journal; `submit` again runs that cell as `bench --resume`, which gives it back, keeps the
    points measured and measures only the rest (a private /run/vmharness for both, as `isolated` gives)."""
    port = 18745
    text = campaign(port, "local", '["wrk"]', '["wrk"]').replace("iterations = 2", "iterations = 4").replace(
        "values = [64, 4096]", "values = [64]")
    (tmp_path / "c.toml").write_text(text)
    out = tmp_path / "camp"
    res = proc.run(isolated([sys.executable, "-c", RESUMED, str(tmp_path / "c.toml"), str(out),
                             "0000-filesize-64_wrk-wrk"]), timeout=WAIT + 120, check=False)
    assert res.ok and res.stdout.strip(), res.stderr
    got = json.loads(res.stdout)
    assert "error" not in got, got
    assert got["before"] and got["journal_left"], got  # killed mid-cell, with what it took on record
    assert got["code"] == 0, got
    assert "0000-filesize-64_wrk-wrk: vmharness bench --resume " in got["err"], got  # said on stderr
    assert not got["journal_after"], got  # given back by the resumed bench
    records = [json.loads(line) for line in (out / "runs/0000-filesize-64_wrk-wrk/records.jsonl").read_text()
               .splitlines()]
    keys = [r["key"] for r in records if r["kind"] == "measurement" and r["ok"]]
    assert set(got["before"]) <= set(keys) and len(keys) == len(set(keys)) == 4, keys
    res = proc.run([sys.executable, "-m", "vmharness.cli", "campaign", "status", str(out), "--json"], timeout=60,
                   check=False)
    assert res.ok and [r["state"] for r in json.loads(res.stdout)["cells"]] == ["done"], res.stdout + res.stderr
