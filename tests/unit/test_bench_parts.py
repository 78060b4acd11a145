"""The benchmark engine's pure parts: connection lists, wrk's report (golden outputs of real wrk
runs), sampler snapshots (a golden stream from this machine), the measurement order, client merging,
the configuration's validation and the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmharness.bench import clients, plan, sweep, wrk
from vmharness.errors import HarnessError
from vmharness.model import config, connections, rules, sections
from vmharness.rundir import sample_summary, samples
from vmharness.rundir.store import RunDir
from vmharness.system.machine import Machine

GOLDEN = Path(__file__).with_name("golden")


def test_connection_ranges_like_seq() -> None:
    got = connections.parse("16:256:16,256:1024:128,1024:1536:256")
    assert got[:3] == (16, 32, 48) and 256 in got and got.count(256) == 1
    assert got[-3:] == (1024, 1280, 1536)
    assert connections.parse("64, 8,8:8:1") == (8, 64)


@pytest.mark.parametrize("bad", ["", "16:", "a", "16:8:4", "0", "16:256:0", "1:2:3:4", "16,,32"])
def test_malformed_connection_lists(bad: str) -> None:
    with pytest.raises(HarnessError):
        connections.parse(bad)


def test_fewer_connections_than_threads() -> None:
    with pytest.raises(HarnessError, match="4 connections is fewer than the 8 client threads"):
        connections.check_threads((4, 16), 8)


def test_wrk_report_line() -> None:
    r = wrk.parse((GOLDEN / "wrk-ok.txt").read_text())
    # The golden's known values, each also in wrk's own text above the report line: "64689 requests in
    # 1.10s", "Requests/sec: 58706.57", "Latency 253.24us 469.61us 5.02ms", "50% 111.00us" ... "99% 2.30ms".
    assert r == {"duration_us": 1101904, "requests": 64689, "bytes": 19406700,
                 "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0, "total": 0},
                 "latency_us": {"min": 20, "mean": 253.244, "stdev": 469.609, "max": 5017,
                                "percentiles": {"50": 111, "75": 144, "90": 542, "99": 2302, "99.9": 4166,
                                                "99.99": 4876}},
                 "requests_per_s": pytest.approx(64689 / 1.101904)}
    assert round(r["requests_per_s"], 2) == 58706.57  # wrk's Requests/sec
    assert "histogram" not in r["latency_us"]  # this golden is from before report.lua wrote one: still read


@pytest.mark.parametrize("runs", ['[[5, -1]]', '[[5]]', '[[9, 1], [5, 1]]', '"x"', '[[5, 1.5]]', '[[5, true]]'])
def test_wrk_report_line_with_a_damaged_histogram(runs: str) -> None:
    line = (GOLDEN / "wrk-ok.txt").read_text().replace('"99.99": 4876}', f'"99.99": 4876}}, "histogram": {runs}')
    assert '"histogram"' in line
    with pytest.raises(HarnessError, match="damaged latency histogram"):
        wrk.parse(line)


def test_wrk_non_2xx_are_errors() -> None:
    r = wrk.parse((GOLDEN / "wrk-404.txt").read_text())
    # wrk's text: "41302 requests in 1.00s", "Non-2xx or 3xx responses: 41302", "Requests/sec: 41276.94".
    assert r["requests"] == 41302 and r["duration_us"] == 1000607
    assert r["errors"] == {"connect": 0, "read": 0, "write": 0, "status": 41302, "timeout": 0, "total": 41302}
    assert round(r["requests_per_s"], 2) == 41276.94
    assert r["latency_us"]["percentiles"] == {"50": 86, "75": 97, "90": 126, "99": 2966, "99.9": 4017, "99.99": 4425}


def test_wrk_that_could_not_connect() -> None:
    with pytest.raises(HarnessError, match=r"wrk produced no result: unable to connect to 127\.0\.0\.1:18099"):
        wrk.parse((GOLDEN / "wrk-refused.stdout").read_text(), (GOLDEN / "wrk-refused.stderr").read_text())


def test_wrk_argv() -> None:
    run = wrk.WrkRun("http://198.18.0.1/", 256, 8, 30, 10, "/tmp/r.lua")
    assert run.argv() == ["wrk", "--threads", "8", "--connections", "256", "--duration", "30s", "--timeout", "10s",
                          "--latency", "--script", "/tmp/r.lua", "http://198.18.0.1/"]
    assert wrk.default_threads(4, 16) == 4 and wrk.default_threads(256, 16) == 16


def test_sampler_stream() -> None:
    pid, snaps = samples.parse((GOLDEN / "sampler-2.txt").read_text())
    assert pid == 2899 and len(snaps) == 2  # the golden's "@pid 2899"
    a, b = snaps
    # The golden's known values: its two "@t" lines, its first snapshot's /proc/stat cpu lines (guest and
    # guest_nice left out), each CPU's column of /proc/interrupts summed, a softirq's and an interface's line.
    assert (a.t, b.t) == (1795265486.460135585, 1795265487.469428736)
    assert a.cpus == {"cpu": (795883, 0, 162521, 1070949, 6361, 0, 2344, 451),
                      "cpu0": (391691, 0, 78801, 546841, 552, 0, 681, 214),
                      "cpu1": (404191, 0, 83720, 524108, 5809, 0, 1662, 237)}
    assert a.irq_per_cpu == (9136421, 9936440) and a.softirq["NET_RX"] == (715218, 825290)
    assert a.net == {"lo": (243139707, 1456471, 243139707, 1456471), "ifb0": (0, 0, 0, 0), "ifb1": (0, 0, 0, 0),
                     "eth0": (3190701710, 75679, 3342570, 42168)}  # bytes and packets, received then sent
    assert a.procs[1] == samples.Proc("process_api", 0, 2743, 889045, 38424576, 2349, 26)  # utime+stime 401+2342
    s = sample_summary.summarize(snaps, roots={1}, sampler_pid=pid)
    # The golden's two `cpu` lines differ by user 72, system 32, idle 86 ticks (190 in all), 1.009 s apart.
    assert s["samples"] == 2 and s["seconds"] == 1.009 and s["ncpu"] == 2
    assert s["cpu"]["cpu"] == {"user": round(100 * 72 / 190, 2), "nice": 0.0, "system": round(100 * 32 / 190, 2),
                               "idle": round(100 * 86 / 190, 2), "iowait": 0.0, "irq": 0.0, "softirq": 0.0,
                               "steal": 0.0, "busy": round(100 * 104 / 190, 2)}
    assert len(b.procs) == 76 and s["process"]["pids_last"] == 15  # pid 1 and its descendants: 15 of the 76
    assert (a.procs[pid].ticks, b.procs[pid].ticks) == (0, 0) and s["sampler_cpu_percent_of_one"] == 0.0


def test_sampler_drops_a_torn_snapshot() -> None:
    text = (GOLDEN / "sampler-2.txt").read_text()
    torn = text + "@t 99999.5\n@stat\ncpu  1 2 3\n"
    assert len(samples.parse(torn)[1]) == 2


def test_process_tree_follows_workers_started_later() -> None:
    snap = samples.Snapshot(0.0, procs={
        10: samples.Proc("nginx", 1, 0, 0, 0, 0), 11: samples.Proc("nginx", 10, 0, 0, 0, 0),
        12: samples.Proc("sh", 11, 0, 0, 0, 0), 20: samples.Proc("other", 1, 0, 0, 0, 0)})
    assert sample_summary.tree(snap, {10}) == {10, 11, 12}


def _cfg(**sweep_kw: object) -> sections.BenchConfig:
    return config.from_json({
        "instance": [{"name": "base"}, {"name": "inst"}],
        "sweep": {"connections": "8,16", "iterations": 2, **sweep_kw}})


def test_points_are_interleaved_and_rotated() -> None:
    keys = [p.key for p in plan.points(_cfg())]
    assert keys[:4] == ["base/8/0", "inst/8/0", "base/16/0", "inst/16/0"]
    assert keys[4:6] == ["inst/8/1", "base/8/1"]  # the second iteration starts with the other instance
    by_iteration = [p.key for p in plan.points(_cfg(interleave="iteration"))]
    assert by_iteration[:4] == ["base/8/0", "base/16/0", "inst/8/0", "inst/16/0"]


def test_config_errors_name_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    cases = {
        "[sweep]\niterations = \"3\"\n": "sweep.iterations must be int",
        "[sweep]\nconections = \"8\"\n": "unknown setting config.sweep.conections",
        "[[instance]]\nnginx = \"x\"\n": "config.instance[0].name is required",
        "[sweep]\nconnections = \"8:4:1\"\n": "sweep.connections: entry '8:4:1' is empty",
        "[[client]]\nthreads = 4\n[sweep]\nconnections = \"2,8\"\n": "2 connections is fewer than the 4",
        "[server]\nmode = \"ftp\"\n": "server.mode must be file or return",
        "[[instance]]\nname = \"a\"\n[[instance]]\nname = \"a\"\n": "instance names must be different",
        "[sweep\n": "b.toml",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(HarnessError) as err:
            config.load(path)
        assert message in err.value.message, (text, err.value.message)


def test_config_round_trips_through_the_manifest() -> None:
    cfg = _cfg(duration=2, wait=1)
    assert config.from_json(cfg.to_json()) == cfg
    assert cfg.sweep.wait == 1.0 and isinstance(cfg.sweep.wait, float)
    with pytest.raises(HarnessError, match=r"sweep\.duration must be int"):
        _cfg(duration=1.5)


def test_clients_share_the_connections() -> None:
    cs = [clients.Client(Machine()), clients.Client(Machine("b")), clients.Client(Machine("c"))]
    assert clients.split(100, cs) == [34, 33, 33]


def _client_run(host: str, requests: int, p99: int, runs: list[list[int]] | None = None) -> clients.ClientRun:
    r = clients.ClientRun(clients.Client(Machine(host)), wrk.WrkRun("http://x/", 8, 2, 1, 1, "s"))
    latency: dict[str, object] = {"mean": 100.0, "max": 900, "percentiles": {"50": 90, "99": p99}}
    if runs is not None:
        latency["histogram"] = runs
    r.result = {"requests": requests, "bytes": requests * 10, "requests_per_s": requests / 2.0, "duration_us": 2e6,
                "errors": {"connect": 0, "read": 1, "write": 0, "status": 2, "timeout": 0, "total": 3},
                "latency_us": latency}
    return r


def test_merging_two_clients_sums_their_histograms() -> None:
    # a: 3,000 requests at 100 us; b: 990 at 200 us and 10 at 5,000 us. The larger of the two clients'
    # medians is b's 200 us; the median of all 4,000 requests is 100 us.
    m = clients.merge([_client_run("a", 3000, 100, [[100, 3000]]),
                       _client_run("b", 1000, 5000, [[200, 990], [5000, 10]])])
    assert m["ok"] and m["requests"] == 4000 and m["requests_per_s"] == 2000.0
    assert m["errors"]["total"] == 6 and m["errors"]["status"] == 4
    lat = m["latency_us"]
    assert lat["count"] == 4000 and lat["min"] == 100 and lat["max"] == 5000
    assert (lat["percentiles"]["50"], lat["percentiles"]["99"], lat["percentiles"]["99.9"]) == (100, 200, 5000)
    assert lat["histogram"] == [[100, 3000], [200, 990], [5000, 10]]
    assert m["latency_merge"] == "exact: 2 clients' histograms summed"
    assert [c["machine"] for c in m["clients_detail"]] == ["a", "b"]
    assert all("histogram" not in c["latency_us"] for c in m["clients_detail"])  # it is in each raw output
    failed = clients.ClientRun(clients.Client(Machine("c")), wrk.WrkRun("http://x/", 8, 2, 1, 1, "s"), error="hung")
    assert clients.merge([_client_run("a", 1, 1), failed]) == {"ok": False, "errors": ["hung"]}


def test_clients_without_histograms_are_not_merged_by_their_maximum() -> None:
    m = clients.merge([_client_run("a", 1000, 400, [[100, 1000]]), _client_run("b", 3000, 700)])
    assert m["latency_us"] == {"percentiles": {}} and m["latency_merge"].startswith("none: a client gave no")
    one = clients.merge([_client_run("a", 1000, 400)])
    assert one["latency_us"]["percentiles"]["99"] == 400 and one["latency_merge"].startswith("wrk's own")


def test_run_directory_keeps_records_and_skips_a_torn_line(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "r", {"kind": "bench"})
    run.append({"kind": "measurement", "key": "a/8/0", "ok": True})
    run.append({"kind": "measurement", "key": "a/16/0", "ok": False})
    with (run.path / "records.jsonl").open("a") as f:
        f.write('{"kind": "measurement", "key": "a/32/0", "o')
    assert run.completed() == {"a/8/0"}
    assert RunDir.open(run.path).manifest["started"]
    with pytest.raises(HarnessError, match="exists and is not empty"):
        RunDir.create(run.path, {})
    with pytest.raises(HarnessError, match="is not a run directory"):
        RunDir.open(tmp_path)


def test_more_iterations_until_the_interval_is_narrow(tmp_path: Path) -> None:
    cfg = config.from_json({"instance": [{"name": "a"}],
                            "sweep": {"connections": "8,16", "iterations": 2, "until_ci": 0.05, "max_iterations": 4}})
    run = RunDir.create(tmp_path / "r", {})
    assert [p.key for p in plan.unsettled(cfg, run.records())] == ["a/8/0", "a/16/0"]  # nothing measured yet
    for conns, values in ((8, [1000.0, 1001.0]), (16, [1000.0, 1500.0])):
        for i, v in enumerate(values):
            run.append({"kind": "measurement", "key": f"a/{conns}/{i}", "ok": True, "instance": "a",
                        "connections": conns, "iteration": i, "client": {"requests_per_s": v}})
    # 8 looks narrow, but no interval that decides when to stop rests on fewer than min(5, max_iterations)
    next_points, why = plan.after_round(cfg, run.records())
    assert [p.key for p in next_points] == ["a/8/2", "a/16/2"]
    assert why == "2 points not yet within ±5.00%: more iterations"
    later: tuple[tuple[int, list[float | None]], ...] = ((8, [1000.5, 1000.2]), (16, [1200.0, None]))
    for conns, more in later:
        for i, got in enumerate(more, 2):
            run.append({"kind": "measurement", "key": f"a/{conns}/{i}", "ok": got is not None, "instance": "a",
                        "connections": conns, "iteration": i, "client": {"requests_per_s": got}})
    # 8 is narrow on 4 values; 16 reached max_iterations (the failed attempt counts)
    assert plan.after_round(cfg, run.records()) == ([], None)
    with pytest.raises(HarnessError, match="max_iterations must be at least"):
        rules.validate(config.from_json({"sweep": {"iterations": 5, "max_iterations": 3}}))


def test_a_point_waits_for_the_snapshot_after_its_end_and_no_longer(tmp_path: Path) -> None:
    stream = tmp_path / "s.txt"
    stream.write_text("@pid 7\n@t 100.5\ncpu 1 2 3\n@end\n@t 101.5\ncpu 1 2 3\n")  # the second is torn
    assert samples.has_snapshot_after(stream, 100.5) and not samples.has_snapshot_after(stream, 101.0)
    with stream.open("a") as f:
        f.write("@end\n")
    assert samples.has_snapshot_after(stream, 101.0)
    stream.write_text("@pid 7\n@t garbled\n@end\n")
    assert not samples.has_snapshot_after(stream, 0.0)
    stream.write_text("")
    assert not samples.has_snapshot_after(stream, 0.0)
    # a guest's clock behind this one's: the snapshot that answers wake 3 carries a time before the end
    stream.write_text("@pid 7\n@t 100.2\n@wake 3\ncpu 1 2 3\n@end\n")
    assert samples.has_snapshot_after(stream, 100.5, 3)
    assert not samples.has_snapshot_after(stream, 100.5) and not samples.has_snapshot_after(stream, 100.5, 4)
    assert not samples.has_snapshot_after(stream, 100.5, 30)  # a number's prefix is not that number
    (snap,) = samples.parse(stream.read_text())[1]
    assert snap.cpus == {"cpu": (1, 2, 3)} and snap.wake == 3
    damaged: list[tuple[int, str]] = []
    assert samples.parse("@pid 7\n@t 100.2\n@wake 3; rm\ncpu 1 2 3\n@end\n", damaged)[1] == []
    assert damaged == [(2, "'@t 100.2': its wake '3; rm' is not a number")]
    stream.write_text("@pid 7\n@t 100.2\n@wake 3\ncpu 1 2 3\n")  # torn: not an answer yet
    assert not samples.has_snapshot_after(stream, 100.5, 3)


def test_the_wait_between_points_counts_from_the_loads_end() -> None:
    # sweep.wait is the rest between one load and the next: reading the samples after it is part of it
    assert sweep.rest(0.5, 100.0, 100.2) == pytest.approx(0.3)
    assert sweep.rest(0.5, 100.0, 101.3) == 0.0 and sweep.rest(0.0, 100.0, 100.0) == 0.0
    assert sweep.rest(0.5, None, 101.3) == 0.5  # every attempt failed: no end to count from
