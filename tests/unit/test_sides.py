"""Saturation from both sides, on inputs of known answer: the samplers' window against the load's,
busy without steal, the host's vfio interrupts from a fake /proc/interrupts, the vCPU reader, and
what the report says of them (the generator's threads: test_threads.py); hostile and damaged inputs
beside each."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from vmharness.analysis import report, saturation, sides
from vmharness.bench import hostview, sampler
from vmharness.rundir import sample_summary, samples
from vmharness.rundir.samples import Snapshot
from vmharness.rundir.store import RunDir


# the window ----------------------------------------------------------------------------------------
def _ticks(t: float, start: float, end: float) -> tuple[int, ...]:
    """One CPU's /proc/stat fields at time t, busy (user) from start to end and idle otherwise: 100
    ticks a second."""
    busy = max(0.0, min(t, end) - start) if t > start else 0.0
    return (round(100 * busy), 0, 0, round(100 * (t - busy)), 0, 0, 0, 0)


def _stream(times: list[float], start: float, end: float) -> list[Snapshot]:
    return [Snapshot(t, cpus={"cpu": _ticks(t, start, end), "cpu0": _ticks(t, start, end)}) for t in times]


def test_snapshots_inside_the_load_give_its_whole_busy_share_where_padding_dilutes_it() -> None:
    dense = _stream([x / 2 for x in range(61)], 10.0, 20.0)  # every 0.5 s over 30 s; busy from 10 to 20
    chosen, how = sample_summary.choose(dense, 10.0, 20.0)
    assert how == {"how": "inside", "load_s": 10.0, "covered_s": 10.0}
    assert sample_summary.summarize(chosen)["cpu"]["cpu"]["busy"] == 100.0
    sparse = _stream([2.5, 7.5, 12.5, 17.5, 22.5, 27.5], 10.0, 20.0)  # every 5 s: two inside, 5 s apart
    chosen, how = sample_summary.choose(sparse, 10.0, 20.0)
    assert how == {"how": "padded", "load_s": 10.0, "covered_s": 15.0}
    assert sample_summary.summarize(chosen)["cpu"]["cpu"]["busy"] == pytest.approx(100 * 10 / 15, abs=0.01)
    # woken as the load began and as it ended (wakes 4 and 5), the sampler's two answers bound the
    # window: the whole load and nothing else, though this machine's clock runs 0.4 s behind
    woken = _stream([2.5, 7.5, 10.0, 12.5, 17.5, 20.0, 22.5], 10.0, 20.0)
    woken[2].wake, woken[5].wake = 4, 5
    behind = [dataclasses.replace(x, t=x.t - 0.4) for x in woken]
    for stream in (woken, behind):
        chosen, how = sample_summary.choose(stream, 10.0, 20.0, (4, 5))
        assert how == {"how": "woken", "load_s": 10.0, "covered_s": 10.0}
        assert sample_summary.summarize(chosen)["cpu"]["cpu"]["busy"] == 100.0
    # an answer missing (a sampler that did not hear the first wake) or out of order: by time, as before
    assert sample_summary.choose(woken, 10.0, 20.0, (3, 5))[1]["how"] == "inside"
    assert sample_summary.choose(woken, 10.0, 20.0, (5, 4))[1]["how"] == "inside"
    assert sample_summary.choose(woken, 10.0, 20.0, (5, 5))[1]["how"] == "inside"


def test_a_window_without_two_snapshots_inside_is_padded_and_one_without_any_says_so() -> None:
    one_inside = _stream([9.0, 15.0, 21.0], 10.0, 20.0)
    chosen, how = sample_summary.choose(one_inside, 10.0, 20.0)
    assert [s.t for s in chosen] == [9.0, 15.0, 21.0] and how["how"] == "padded" and how["covered_s"] == 12.0
    chosen, how = sample_summary.choose(_stream([1.0, 2.0], 10.0, 20.0), 10.0, 20.0)  # the stream stopped before
    assert [s.t for s in chosen] == [2.0] and how["covered_s"] == 0.0
    assert "nothing to difference" in sample_summary.summarize(chosen)["note"]
    same = [Snapshot(5.0, cpus={"cpu": (1,) * 8}), Snapshot(5.0, cpus={"cpu": (2,) * 8})]
    assert "0 s apart" in sample_summary.summarize(same)["note"]  # a clock that stood still divides by nothing


def test_the_samplers_summaries_say_how_their_window_was_taken(tmp_path: Path) -> None:
    """Samplers.summaries on a stream file: the real parser, the real choice, `window` in the summary."""
    path = tmp_path / "samples" / "local.txt"
    path.parent.mkdir()
    path.write_text("@pid 7\n" + "".join(_text(t, 10.0, 20.0) for t in [x / 2 for x in range(61)]))
    s = sampler.Samplers(RunDir.create(tmp_path / "run", {}), 0.5)
    s.files["local"] = path
    got = s.summaries({"local": 0}, 10.0, 20.0, {})["local"]
    assert got["window"] == {"how": "inside", "load_s": 10.0, "covered_s": 10.0}
    assert got["cpu"]["cpu"]["busy"] == 100.0 and got["samples"] == 21


def _text(t: float, start: float, end: float, irq: str = "") -> str:
    ticks = " ".join(map(str, _ticks(t, start, end)))
    return f"@t {t}\ncpu  {ticks} 0 0\ncpu0 {ticks} 0 0\n{irq}@end\n"


# steal ---------------------------------------------------------------------------------------------
def test_busy_leaves_steal_out_and_keeps_it_beside() -> None:
    a = Snapshot(0.0, cpus={"cpu": (0, 0, 0, 0, 0, 0, 0, 0)})
    b = Snapshot(1.0, cpus={"cpu": (50, 0, 10, 10, 0, 0, 0, 30)})  # user 50, system 10, idle 10, steal 30
    cpu = sample_summary.summarize([a, b])["cpu"]["cpu"]
    assert (cpu["busy"], cpu["steal"]) == (60.0, 30.0)


@pytest.mark.parametrize(("shares", "busy"), [
    ({"user": 60.0, "idle": 10.0, "iowait": 0.0, "steal": 30.0, "busy": 90.0}, 60.0),  # written when busy held steal
    ({"busy": 95.0}, 95.0),  # a record that kept busy alone
    ({"idle": "x"}, None), ({"busy": [1]}, None), ({}, None), ({"idle": 40.0, "steal": None}, None),
])
def test_busy_without_steal_from_records_old_new_and_damaged(shares: dict[str, Any], busy: float | None) -> None:
    assert sample_summary.busy_share(shares) == busy


# the host's vfio interrupts ------------------------------------------------------------------------
def _interrupts(msix0: int, msix1: int, other: int, new: int | None = None) -> str:
    """A host's /proc/interrupts with two vectors of one passed-through NIC (one of them with its
    counts split over both CPUs), another device's vfio line and an unrelated one."""
    lines = ["           CPU0       CPU1",
             f" 45: {msix0} 0 IR-PCI-MSIX-0000:b3:00.0 0-edge vfio-msix[0](0000:b3:00.0)",
             f" 46: {msix1 // 2} {msix1 - msix1 // 2} IR-PCI-MSIX-0000:b3:00.0 1-edge vfio-msix[1](0000:b3:00.0)",
             f" 47: {other} 0 IR-PCI-MSI 2-edge vfio-msi[0](0000:17:00.1)",
             " 48: 999 999 IR-PCI-MSIX-0000:01:00.0 0-edge nvme0q0",
             "NMI: 0 0 Non-maskable interrupts"]
    if new is not None:
        lines.insert(4, f" 49: {new} 0 IO-APIC 16-fasteoi vfio-intx(0000:b3:00.0)")
    return "\n".join(lines) + "\n"


def test_the_hosts_vfio_interrupts_are_summed_per_device_from_a_fake_proc_interrupts() -> None:
    text = ("@pid 1\n" + _text(0.0, 0, 0, _interrupts(100, 200, 5)) + _text(2.0, 0, 0, _interrupts(2100, 4200, 5, 60)))
    _, snaps = samples.parse(text)
    got = sample_summary.summarize(snaps)
    # (2000 + 4000 + 60 that appeared in the window) / 2 s; the other device's line stood still
    assert got["vfio_interrupts_per_s"] == {"0000:b3:00.0": 3030.0, "0000:17:00.1": 0.0}
    assert got["vfio_vectors"] == {"0000:b3:00.0": 3, "0000:17:00.1": 1}
    host = hostview.vfio(got, ("0000:b3:00.0", "0000:5e:00.0"))  # the run's devices only; one has no line
    assert host["vfio_interrupts_per_s"] == {"0000:b3:00.0": 3030.0, "0000:5e:00.0": 0.0}
    assert host["vfio_vectors"] == {"0000:b3:00.0": 3, "0000:5e:00.0": 0}


def test_no_vfio_figure_without_a_device_or_a_host_summary() -> None:
    _, snaps = samples.parse(_text(0.0, 0, 0, _interrupts(1, 1, 1)) + _text(1.0, 0, 0, _interrupts(1, 1, 1)))
    assert hostview.vfio(sample_summary.summarize(snaps), ()) == {}
    assert hostview.vfio({"samples": 1, "note": "fewer than two samples"}, ("0000:b3:00.0",)) == {}
    plain = sample_summary.summarize(_stream([0.0, 1.0], 0, 1))
    assert "vfio_interrupts_per_s" not in plain  # a machine without vfio lines records nothing new


@pytest.mark.parametrize("line", [
    " 45: 7 7 IR-PCI-MSIX vfio-msix[0](b3:00.0)",  # a BDF without its domain: not the kernel's name
    " 45: 7 7 IR-PCI-MSIX vfio-msix[x](0000:b3:00.0)",
    " 45: 7 x IR-PCI-MSIX vfio-msix[0](0000:b3:00.0)",  # a count that is not one
    " 45: 7 7 IR-PCI-MSIX notvfio-msix[0](0000:b3:00.0)",
])
def test_lines_that_only_look_like_vfio_are_not_counted(line: str) -> None:
    head = "           CPU0       CPU1\n"
    later = line.replace("7", "9")
    _, snaps = samples.parse(_text(0.0, 0, 0, f"{head}{line}\n") + _text(1.0, 0, 0, f"{head}{later}\n"))
    assert "vfio_interrupts_per_s" not in sample_summary.summarize(snaps)


# the vCPU threads --------------------------------------------------------------------------------
def test_vcpu_busy_between_two_readings_and_nothing_from_damaged_ones() -> None:
    assert hostview.vcpu_busy([(10.0, [1.0, 2.0]), (12.0, [2.8, 2.5])]) == {"vcpu_busy_percent": [90.0, 25.0],
                                                                            "window_s": 2.0}
    damaged: list[list[tuple[float, list[float]]]] = [
        [], [(1.0, [1.0])], [(1.0, [1.0]), (1.0, [2.0])], [(1.0, [1.0]), (2.0, [2.0, 3.0])], [(1.0, []), (2.0, [])]]
    for bad in damaged:
        assert hostview.vcpu_busy(bad) == {}


class FakeClock:
    """The reader's clock and its stop event, driven by the test: a wait moves the clock on by what it
    waits, at once, so the instants the reader keeps are exact whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.stop = False

    def monotonic(self) -> float:
        return self.now

    def wait(self, timeout: float) -> bool:
        if not self.stop:
            self.now += timeout
        return self.stop

    def set(self) -> None:
        self.stop = True


def test_the_vcpu_reader_reads_at_its_instants(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(hostview, "time", clock)
    calls: list[float] = []

    def probe() -> list[float]:
        calls.append(clock.now)
        clock.now += 0.01  # a read takes 10 ms: the reading is dated at its middle
        return [len(calls) * 0.04]

    reader = hostview.VcpuReader(probe, 1.0)
    reader.stopped = clock  # type: ignore[assignment]
    reader.begin(0.0)
    assert reader.thread is not None
    reader.thread.join(timeout=30)
    # threads.instants(1): 0.1 s in, then 0.8 s on, both counted from the release (a slow read does not drift them)
    assert [round(c - 1000.0, 6) for c in calls] == [0.1, 0.9]
    assert reader.result() == {"vcpu_busy_percent": [5.0], "window_s": 0.8}  # 0.04 CPU s in 0.8 s


def test_the_vcpu_reader_runs_in_its_own_thread_and_hands_back_a_failure() -> None:
    """The same reader on the real clock: its readings come no earlier than their instants (a loaded
    machine only makes them later), and the share is the one between the readings it kept."""
    calls: list[float] = []

    def probe() -> list[float]:
        calls.append(time.monotonic())
        return [len(calls) * 0.05]

    reader = hostview.VcpuReader(probe, 1.0)
    began = time.monotonic()
    reader.begin(time.time())
    assert reader.thread is not None
    reader.thread.join(timeout=30)  # both readings taken, however late
    got = reader.result()
    assert len(calls) == 2 and calls[0] - began >= 0.1 and calls[1] - began >= 0.9, calls
    (t0, _), (t1, _) = reader.readings
    assert got == {"vcpu_busy_percent": [round(100 * 0.05 / (t1 - t0), 1)], "window_s": round(t1 - t0, 3)}

    def broken() -> list[float]:
        raise OSError("the domain went away")

    failing = hostview.VcpuReader(broken, 1.0)
    failing.begin(time.time())
    assert failing.thread is not None
    failing.thread.join(timeout=30)  # its first read failed and ended it
    with pytest.raises(OSError, match="went away"):
        failing.result()
    early = hostview.VcpuReader(probe, 60.0)  # a load that failed at once: result() does not wait for it
    calls.clear()
    early.begin(time.time())
    assert early.result() == {} and calls == []  # stopped before its first instant (2 s in): never read
    assert early.thread is not None and not early.thread.is_alive()
    assert hostview.VcpuReader(None, 1.0).result() == {}


# the report -------------------------------------------------------------------------------------
def _cpu(busy: float, steal: float = 0.0) -> dict[str, Any]:
    return {"cpu": {"cpu": {"user": busy, "idle": 100 - busy - steal, "iowait": 0.0, "steal": steal,
                            "busy": busy + steal}}}  # `busy` as records before this change wrote it


def _run(tmp_path: Path, *, steal: float = 0.0, server: float = 99.0, client: float = 50.0,
         wrk_threads: list[float] | None = None, vfio: float | None = None, vectors: int = 2,
         bdf: bool = True) -> RunDir:
    run = RunDir.create(tmp_path / "run", {
        "config": {"instance": [{"name": "base"}], "server": {"workers": 0},
                   "guest": {"bdf": ["0000:b3:00.0"] if bdf else []}},
        "machines": {"server": {"machine": "guest"}, "clients": [{"machine": "cli"}]}})
    for it in range(3):
        for conns, rps in ((4, 800.0), (8, 1000.0 + it), (16, 900.0)):
            detail: dict[str, Any] = {"machine": "cli", "connections": conns}
            if wrk_threads is not None:
                detail["threads_cpu"] = {"seconds": 8.0, "percent_of_one": wrk_threads, "main_percent_of_one": 0.1}
            record: dict[str, Any] = {
                "kind": "measurement", "key": f"base/{conns}/{it}", "ok": True, "instance": "base",
                "connections": conns, "iteration": it,
                "client": {"requests_per_s": rps, "requests": int(rps * 10), "errors": {"total": 0},
                           "latency_us": {"percentiles": {"50": 10, "90": 20, "99": 40, "99.9": 80}},
                           "clients_detail": [detail]},
                "samples": {"guest": _cpu(server - steal, steal), "cli": _cpu(client)}}
            if vfio is not None:
                record["host"] = {"vcpu_busy_percent": [97.0], "window_s": 8.0,
                                  "vfio_interrupts_per_s": {"0000:b3:00.0": vfio * rps / 1000},
                                  "vfio_vectors": {"0000:b3:00.0": vectors}}
            run.append(record)
    return run


def test_steal_is_left_out_of_the_servers_busy_share_and_warned_of_with_its_figure(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, steal=12.0, server=99.0))
    flags = "\n".join(a.flags)
    assert "not saturated: the server was 87% busy at the peak (8 connections)" in flags
    assert "steal: the server's CPUs were stolen 12% of the time at the peak (8 connections), beside 87% busy" in flags
    row = next(r for r in report.to_json(a)["rows"] if r["connections"] == 8)
    assert (row["server_busy_percent"], row["server_steal_percent"]) == (87.0, 12.0)
    assert " 87% st 12% " in report.text(a)  # the SERVER column: steal beside busy
    assert report.to_csv(a).splitlines()[0].count("server_steal_percent") == 1


def test_a_thread_at_a_whole_core_is_client_bound_even_when_the_server_is_busy_too(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, wrk_threads=[97.0, 40.0], client=95.0))
    flags = [f for f in a.flags if f.startswith("client-bound")]
    assert flags == [
        "client-bound: wrk thread 1 on client cli was 97% of a core at the peak (8 connections), while the server "
        "was 99% busy too: the result may be the client's",
        "client-bound: client cli was 95% busy at the peak (8 connections), while the server was 99% busy too: the "
        "result may be the client's"]
    assert a.at_peak is not None and a.at_peak["client_threads_percent_of_one"] == {"cli": [97.0, 40.0]}
    assert "wrk threads on cli 97%, 40% of a core" in report.text(a)
    two = saturation.analyse(_run(tmp_path / "2", wrk_threads=[97.0, 91.0], server=70.0))
    assert ("client-bound: wrk threads 1, 2 on client cli were 97%, 91% of a core at the peak (8 connections), "
            "while the server was 70% busy: this measures the client (seed 003)") in two.flags
    cool = saturation.analyse(_run(tmp_path / "3", wrk_threads=[89.0, 40.0]))
    assert not [f for f in cool.flags if f.startswith("client-bound")]


def test_the_vfio_rate_at_the_peak_is_shown_and_a_storm_or_silence_warned_of(tmp_path: Path) -> None:
    fine = saturation.analyse(_run(tmp_path / "fine", vfio=300.0))  # 0.3 per request
    assert not [f for f in fine.flags if "vfio" in f]
    text = report.text(fine)
    assert ("at the peak (8 connections): the server 99% busy and 0.0% stolen; its vCPU threads ran 97% of the "
            "time on the host; the host took 300 vfio interrupts/s (0.3 per request); client cli 50% busy") in text
    row = next(r for r in report.to_json(fine)["rows"] if r["connections"] == 8)
    assert row["vfio_interrupts_per_s"] == pytest.approx(300.3, abs=0.1)
    storm = saturation.analyse(_run(tmp_path / "storm", vfio=9000.0))
    assert any(f.startswith("interrupt storm? the host took 9.0 vfio interrupts per request from 0000:b3:00.0 at the "
                            "peak (8 connections) (9,009/s at 1,001 requests/s)") for f in storm.flags), storm.flags
    posted = saturation.analyse(_run(tmp_path / "posted", vfio=0.0))
    assert any(f.startswith("vfio interrupts: the host took 0.0 per second from 0000:b3:00.0 at the peak (8 "
                            "connections), 0.0000 per request at 1,001 requests/s: its interrupts are posted")
               for f in posted.flags), posted.flags
    unused = saturation.analyse(_run(tmp_path / "unused", vfio=0.0, vectors=0))
    assert any("it has no vfio interrupt line on the host" in f for f in unused.flags)


def test_records_without_the_new_figures_report_as_before(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {"config": {"instance": [{"name": "b"}]},
                                           "machines": {"server": {"machine": "s"}, "clients": []}})
    for it in range(2):
        run.append({"kind": "measurement", "key": f"b/8/{it}", "ok": True, "instance": "b", "connections": 8,
                    "iteration": it, "client": {"requests_per_s": 100.0 + it, "requests": 1000, "errors": {"total": 0},
                                                "latency_us": {"percentiles": {"50": 1, "90": 2, "99": 3}}},
                    "samples": {"s": {"cpu": {"cpu": {"busy": 95.0}}}}})
    a = saturation.analyse(run)
    data = report.to_json(a)
    assert data["at_peak"]["server_busy_percent"] == 95.0 and data["at_peak"]["vfio_interrupts_per_s"] is None
    row = data["rows"][0]
    assert row["server_steal_percent"] is None and row["client_thread_max_percent"] is None
    assert row["vfio_interrupts_per_s"] is None
    assert "at the peak (8 connections): the server 95% busy;" not in report.text(a)  # no steal figure to show
    assert "at the peak (8 connections): the server 95% busy" in report.text(a)


@pytest.mark.parametrize("damage", [
    {"threads_cpu": "hot"}, {"threads_cpu": {"percent_of_one": [[97]]}}, {"threads_cpu": {"percent_of_one": True}},
])  # text where a figure belongs refuses the record instead: tests/unit/test_hostile_runs.py
def test_damaged_thread_figures_are_left_out(tmp_path: Path, damage: dict[str, Any]) -> None:
    run = _run(tmp_path)
    lines = (run.path / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for r in records:
        r["client"]["clients_detail"][0].update(damage)
    (run.path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    a = saturation.analyse(RunDir.open(run.path))
    assert a.at_peak is not None and a.at_peak["client_threads_percent_of_one"] == {}


@pytest.mark.parametrize("host", [
    {"vfio_interrupts_per_s": "lots"}, {"vfio_interrupts_per_s": {"0000:b3:00.0": [5]}}, {"vfio_interrupts_per_s": {}},
    "broken", {"vfio_interrupts_per_s": {"0000:b3:00.0": 5.0}, "vfio_vectors": "two"},
])
def test_damaged_host_figures_are_left_out_or_read_as_far_as_they_go(tmp_path: Path, host: Any) -> None:
    run = _run(tmp_path)
    records = [json.loads(line) for line in (run.path / "records.jsonl").read_text().splitlines()]
    for r in records:
        r["host"] = host
    (run.path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    a = saturation.analyse(RunDir.open(run.path))
    assert a.at_peak is not None
    rate = a.at_peak["vfio_interrupts_per_s"]
    assert rate == (5.0 if isinstance(host, dict) and host.get("vfio_vectors") == "two" else None)
    assert report.text(a)


def test_the_server_sharing_a_machine_with_a_client_is_not_judged_as_a_client(tmp_path: Path) -> None:
    s = sides.Sides()
    s.add({"samples": {"local": _cpu(99.0)}, "client": {}}, "local", ["local"])
    assert s.clients == {} and s.steal == [0.0]
