"""VM exits per request, on inputs of known answer: KVM's counters as libvirt's bulk stats give them
(keys as `virsh domstats --vcpu` prints them under KVM), the reader's deltas over its window, the
per-request figure in the report and its JSON, the one line under TCG, and damaged records refused by
name; a negative control (the same counts for two instances) shows no difference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import libvirt
import pytest

from vmharness.analysis import exits, markdown, report, saturation
from vmharness.bench import hostview
from vmharness.errors import HarnessError
from vmharness.guest import running
from vmharness.rundir.store import RunDir

# libvirt 9's vCPU group for a 2-vCPU KVM guest: its own figures, then KVM's statistics as
# vcpu.<n>.<name>.<type> (QEMU's query-stats); histograms and instant values beside the counters
STATS: dict[str, Any] = {
    "vcpu.current": 2, "vcpu.maximum": 2,
    "vcpu.0.state": 1, "vcpu.0.time": 9_120_000_000, "vcpu.0.wait": 0, "vcpu.0.delay": 3_000,
    "vcpu.0.exits.sum": 1000, "vcpu.0.io_exits.sum": 40, "vcpu.0.mmio_exits.sum": 300,
    "vcpu.0.halt_exits.sum": 200, "vcpu.0.irq_exits.sum": 150, "vcpu.0.l1d_flush.sum": 900,
    "vcpu.0.halt_wakeup.sum": 180, "vcpu.0.guest_mode.cur": 0, "vcpu.0.halt_poll_success_ns.sum": 12345,
    "vcpu.1.state": 1, "vcpu.1.time": 8_000_000_000,
    "vcpu.1.exits.sum": 500, "vcpu.1.io_exits.sum": 10, "vcpu.1.mmio_exits.sum": 100,
    "vcpu.1.halt_exits.sum": 100, "vcpu.1.irq_exits.sum": 50, "vcpu.1.l1d_flush.sum": 450,
    "vcpu.1.signal_exits.max": 7,  # not a running total
}


def test_the_exit_counters_of_libvirts_bulk_stats_summed_over_the_vcpus() -> None:
    assert running.exit_counts(STATS) == {"exits": 1500, "io_exits": 50, "mmio_exits": 400, "halt_exits": 300,
                                          "irq_exits": 200, "l1d_flush": 1350}


@pytest.mark.parametrize("key, value", [
    ("vcpu.0.exits.sum", -5), ("vcpu.0.exits.sum", True), ("vcpu.0.exits.sum", 1.5), ("vcpu.0.exits.sum", "9"),
    ("vcpu.x.exits.sum", 9), ("vcpu.0.Exits.sum", 9), ("vcpu.0.exits.sum.sum", 9), ("vm.exits.sum", 9),
    ("vcpu.0.exits", 9), ("vcpu.12345.exits.sum", 9), ("vcpu.0.halt_poll_invalid.sum", 9),
])
def test_what_is_not_a_vcpus_exit_counter_is_not_counted(key: str, value: Any) -> None:
    assert running.exit_counts({key: value}) == {}


def test_the_deltas_between_the_first_and_last_reading() -> None:
    first = {"exits": 100, "io_exits": 10, "halt_exits": 5}
    last = {"exits": 400, "io_exits": 70, "halt_exits": 4, "mmio_exits": 9}  # halt went back, mmio new
    assert hostview.exit_deltas([first, {"exits": 1}, last]) == {"exits": 300, "io_exits": 60}
    assert hostview.exit_deltas([last]) == {} and hostview.exit_deltas([{}, last]) == {}  # TCG counts nothing


def test_the_reader_takes_the_counters_at_the_vcpu_readings_instants() -> None:
    seconds, counts = iter([[1.0], [1.5]]), iter([{"exits": 10, "io_exits": 1}, {"exits": 410, "io_exits": 41}])
    reader = hostview.VcpuReader(lambda: next(seconds), 1.0, lambda: next(counts))
    reader.begin(0.0)
    assert reader.thread is not None
    reader.thread.join(30)  # both readings taken (0.1 and 0.9 s after the release)
    got = reader.result()
    assert got["kvm_exits"] == {"exits": 400, "io_exits": 40} and set(got) == {"vcpu_busy_percent", "window_s",
                                                                               "kvm_exits"}
    tcg = hostview.VcpuReader(lambda: [1.0], 1.0, None)
    tcg.begin(0.0)
    assert tcg.thread is not None
    tcg.thread.join(30)
    assert "kvm_exits" not in tcg.result()


def _run(tmp_path: Path, counts: dict[str, dict[str, Any]] | None, kvm: bool = True,
         qemu: dict[str, float] | None = None) -> RunDir:
    """Two instances, three boots each, the peak at 8 connections (1,000 req/s); the host read its
    counters over 2 s, so 2,000 requests lie in each window; `qemu`: each one's QEMU outside its vCPUs."""
    run = RunDir.create(tmp_path / "run", {
        "config": {"instance": [{"name": "base"}, {"name": "mitig"}], "server": {"workers": 0}},
        "guest": {"kvm": kvm}, "machines": {"server": {"machine": "guest"}, "clients": [{"machine": "cli"}]}})
    for it in range(3):
        for name in ("base", "mitig"):
            for conns, rps in ((4, 800.0), (8, 1000.0), (16, 900.0)):
                record: dict[str, Any] = {
                    "kind": "measurement", "key": f"{name}/{conns}/{it}", "ok": True, "instance": name,
                    "connections": conns, "iteration": it,
                    "client": {"requests_per_s": rps, "requests": int(rps * 10), "errors": {"total": 0},
                               "latency_us": {"percentiles": {"50": 10, "90": 20, "99": 40, "99.9": 80}}},
                    "host": {"vcpu_busy_percent": [90.0], "window_s": 2.0}}
                if counts is not None:
                    record["host"]["kvm_exits"] = counts[name]
                if qemu is not None:
                    record["host"]["qemu_other_percent"] = qemu[name]
                run.append(record)
    return run


BASE = {"exits": 6000, "io_exits": 200, "mmio_exits": 2000, "halt_exits": 3000, "irq_exits": 800}
MITIG = {**BASE, "exits": 10000, "msr_exits": 4000, "l1d_flush": 10000}  # 2 more exits a request, each flushing


def test_exits_per_request_at_the_peak_by_instance_and_kind(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, {"base": BASE, "mitig": MITIG}))
    assert a.peak == 8 and a.exits_note is None
    said = [line for line in report.answer(a) if "exits" in line or "µs" in line]
    assert said == [
        "VM exits per request at the peak (8 connections), KVM's counts:",
        "  base: 3 exits per request (halt 1.5, mmio 1, irq 0.4, io 0.1) over 3 iteration(s); its vCPU threads "
        "900 µs of host CPU per request",
        "  mitig: 5 exits per request (msr 2, halt 1.5, mmio 1, irq 0.4, io 0.1), and l1d_flush 5 over 3 "
        "iteration(s); its vCPU threads 900 µs of host CPU per request",
    ]
    got = report.to_json(a)["vm_exits"]
    assert got["note"] is None and got["instances"]["mitig"] == {
        "exits_per_request": {"exits": 5.0, "halt_exits": 1.5, "io_exits": 0.1, "irq_exits": 0.4, "l1d_flush": 5.0,
                              "mmio_exits": 1.0, "msr_exits": 2.0},
        "iterations": 3, "vcpu_cpu_us_per_request": 900.0, "qemu_other_cpu_us_per_request": None}
    assert "- mitig: 5 exits per request" in markdown.render(a)


def test_the_same_counts_give_the_same_figures_a_negative_control(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, {"base": BASE, "mitig": BASE}))
    base, mitig = (v for v in a.exits)
    assert base.exits == mitig.exits and base.vcpu_us == mitig.vcpu_us


def test_under_tcg_one_line_says_the_view_is_not_available(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, None, kvm=False))
    said = [line for line in report.answer(a) if "exits" in line]
    assert said == ["VM exits per request: not available: the guests ran under TCG, which has no VM exits to "
                    "count; the vCPU threads' host CPU per request: base 900 µs, mitig 900 µs"]
    assert report.to_json(a)["vm_exits"]["instances"]["base"]["exits_per_request"] is None


def test_qemus_own_cpu_per_request_beside_the_vcpus(tmp_path: Path) -> None:
    """QEMU's threads but its vCPUs: 5% and 15% of a CPU at 1,000 requests/s are 50 and 150 µs a request,
    under KVM on each instance's line, under TCG in the one line; the same share gives the same figure."""
    a = saturation.analyse(_run(tmp_path / "kvm", {"base": BASE, "mitig": BASE}, qemu={"base": 5.0, "mitig": 15.0}))
    said = [line for line in report.answer(a) if "QEMU" in line]
    assert [line.split("; ", 1)[1] for line in said] == [
        "its vCPU threads 900 µs of host CPU per request, QEMU's other threads 50 µs",
        "its vCPU threads 900 µs of host CPU per request, QEMU's other threads 150 µs"]
    assert report.to_json(a)["vm_exits"]["instances"]["mitig"]["qemu_other_cpu_us_per_request"] == 150.0
    tcg = saturation.analyse(_run(tmp_path / "tcg", None, kvm=False, qemu={"base": 5.0, "mitig": 5.0}))
    assert next(line for line in report.answer(tcg) if "QEMU" in line).endswith(
        "host CPU per request: base 900 µs (QEMU's other threads 50 µs), mitig 900 µs (QEMU's other threads 50 µs)")


def test_kvm_without_counters_says_what_they_need(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, None, kvm=True))
    assert a.exits_note is not None and "libvirt gave no KVM counters" in a.exits_note


def test_a_bench_has_no_hypervisor_view() -> None:
    assert exits.note([{"config": {}}], []) is None and exits.to_json([], None) is None


@pytest.mark.parametrize("damage", [
    {"kvm_exits": {"exits": "many"}}, {"kvm_exits": ["exits", 5]}, {"kvm_exits": {}},
    {"kvm_exits": {"exits": 5}, "window_s": None}, {"kvm_exits": {"exits": 5}, "window_s": 0},
])
def test_a_damaged_count_is_an_error_naming_the_record(tmp_path: Path, damage: dict[str, Any]) -> None:
    run = _run(tmp_path, {"base": BASE, "mitig": MITIG})
    path = run.path / "records.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[-1])
    record["host"].update(damage)
    path.write_text("\n".join([*lines[:-1], json.dumps(record)]) + "\n")
    # text where a count belongs is refused as the records are read, naming the line
    with pytest.raises(HarnessError, match=r"records.jsonl(: the measurement 'mitig/16/2' is damaged \(| line \d+ is a "
                                           r"measurement record with )host.kvm_exits"):
        saturation.analyse(RunDir.open(run.path))


@pytest.mark.parametrize("count", [-1, 2**60, 1.5])
def test_a_count_out_of_range_leaves_the_record_out_and_says_so(tmp_path: Path, count: float) -> None:
    run = _run(tmp_path, {"base": BASE, "mitig": {**MITIG, "exits": count}})
    a = saturation.analyse(RunDir.open(run.path))
    assert "left out" in a.flags[0] and "host.kvm_exits.exits" in a.flags[0]
    assert a.peak is not None and 8 not in a.cells.get("mitig", {})


def test_a_kind_that_never_exited_is_not_named_in_the_text(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, {"base": {**BASE, "signal_exits": 0}, "mitig": {"exits": 10}}))
    said = [line for line in report.answer(a) if line.startswith(("  base:", "  mitig:"))]
    assert "signal" not in said[0] and said[1].startswith("  mitig: 0.005 exits per request over 3 iteration(s)")
    assert report.to_json(a)["vm_exits"]["instances"]["base"]["exits_per_request"]["signal_exits"] == 0.0


class _Conn:
    """libvirt's connection as kvm_counters uses it: one bulk stats call, then close."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.closed = answer, False

    def domainListGetStats(self, doms: list[object], groups: int) -> Any:
        assert groups == libvirt.VIR_DOMAIN_STATS_VCPU and doms == ["dom"]
        if isinstance(self.answer, Exception):
            raise self.answer
        return [("dom", self.answer)]

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("answer, counted", [
    (STATS, {"exits": 1500, "io_exits": 50, "mmio_exits": 400, "halt_exits": 300, "irq_exits": 200,
             "l1d_flush": 1350}),
    ({"vcpu.0.state": 1, "vcpu.0.time": 5}, {}),  # TCG: libvirt has no KVM statistics to pass on
    (libvirt.libvirtError("query-stats failed"), {}),  # a view beside the measurement: not its failure
])
def test_the_counters_are_read_in_one_call_and_a_failing_call_gives_none(monkeypatch: pytest.MonkeyPatch,
                                                                          answer: Any, counted: dict[str, int]) -> None:
    conn = _Conn(answer)
    monkeypatch.setattr(running, "domain", lambda guest: (conn, "dom"))
    assert running.kvm_counters(None) == counted and conn.closed  # type: ignore[arg-type]
