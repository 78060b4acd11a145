"""A host whose CPUs other work holds: the vCPU threads' wait for a CPU is read beside their runtime,
kept in the point's record, shown at the peak, and a positive control that misses its expectation
there is said not to be judged instead of a false alarm (issue: the control judged fairly on a loaded
machine); on a quiet host the same miss is still a warning that the run's intervals are in doubt."""

from __future__ import annotations

import math
from itertools import count
from pathlib import Path

import pytest

from tests.unit.test_variants import _facts, _manifest
from vmharness.analysis import report, saturation, sides, variants
from vmharness.bench import hostview
from vmharness.guest import running
from vmharness.rundir.store import RunDir
from vmharness.stats import Change


def _change(change: float, low: float, high: float) -> Change:
    return Change(change, low, high, 0.05, 4, 0.95, "paired by boot")


M = {"config": {"control": {"cap": 50, "name": "control"}}}
MISSED = {"control": {"throughput": _change(-0.56, -0.60, -0.52)}}  # expected about -43%: outside


def test_the_reader_gives_each_vcpus_share_waited_over_the_same_window() -> None:
    seconds, waited = count(1), count(0)
    reader = hostview.VcpuReader(lambda: [next(seconds) * 0.4, 0.1], 1.0, None,
                                 lambda: ([next(waited) * 0.2, 0.0], None))
    reader.readings = [(10.0, [0.4, 0.1]), (11.0, [0.8, 0.1])]
    reader.waited = [[0.0, 0.0], [0.2, 0.0]]
    reader.others = [None, None]  # QEMU's own time not known: none is claimed
    assert reader.result() == {"vcpu_busy_percent": [40.0, 0.0], "window_s": 1.0, "vcpu_wait_percent": [20.0, 0.0]}
    reader.waited = [[0.0, 0.0]]  # a wait read missing: no wait is claimed, the runtime stands
    assert reader.result() == {"vcpu_busy_percent": [40.0, 0.0], "window_s": 1.0}
    reader.waited = [[0.0], [0.2]]  # a vCPU's thread not found the second time: no wait is claimed
    assert "vcpu_wait_percent" not in reader.result()


@pytest.mark.parametrize(("others", "percent"), [([3.0, 3.25], 25.0), ([3.0, 2.995], 0.0), ([3.0, None], None),
                                                 ([3.0], None)],
                         ids=["read twice", "a tick under: none", "unknown once", "read once"])
def test_the_reader_gives_qemus_own_share_over_the_same_window(others: list[float | None],
                                                               percent: float | None) -> None:
    reader = hostview.VcpuReader(lambda: [0.0], 1.0, None, lambda: ([0.0], 0.0))
    reader.readings = [(10.0, [0.4]), (11.0, [0.8])]
    reader.waited, reader.others = [[0.0], [0.0]], others
    assert reader.result().get("qemu_other_percent") == percent


def _stat(utime: int, stime: int) -> str:
    """`_THREADS`'s first two lines: the process's stat after its name, and the clock's ticks a second."""
    return f"total S 1 2 3 0 -1 4194560 7 0 0 0 {utime} {stime} 0 0 20 0 6 0 193606\nticks 100\n"


def test_a_miss_on_a_contended_host_cannot_be_judged() -> None:
    c = variants.control(M, MISSED, [90.0], [10.0], None, [35.0, 4.0])
    assert c is not None and not c.recovered and not c.judged and c.waited == 35.0
    flag = variants.control_flag(c)
    assert flag is not None and flag.startswith("the positive control cannot be judged on this run")
    assert "waited up to 35% of the time for a host CPU" in flag and "not to be trusted" not in flag
    assert variants.verdict(c).startswith("cannot be judged: ")
    assert "cannot be judged" in variants.control_line(c)


def test_the_same_miss_on_a_quiet_host_is_still_not_recovered() -> None:
    """The negative control: a wait under the limit (or none recorded) leaves the alarm as it was."""
    for waits in ([variants.WAIT_LIMIT - 0.1], None, []):
        c = variants.control(M, MISSED, [90.0], [10.0], None, waits)
        assert c is not None and c.judged and not c.recovered
        flag = variants.control_flag(c)
        assert flag is not None and "was not recovered" in flag and "not to be trusted" in flag, waits
        assert variants.verdict(c) == "NOT recovered"


def test_a_control_recovered_on_a_contended_host_is_recovered() -> None:
    expected = variants.expected_change(50, [90.0], [10.0])[0]
    near = {"control": {"throughput": _change(expected, expected - 0.05, expected + 0.05)}}
    c = variants.control(M, near, [90.0], [10.0], None, [40.0])
    assert c is not None and c.recovered and variants.control_flag(c) is None and variants.verdict(c) == "recovered"
    one = variants.control(M, {"control": {"throughput": _change(-0.5, -math.inf, math.inf)}}, [90.0], None,
                           None, [40.0])
    assert one is not None and variants.verdict(one) == "one iteration, nothing to check"


@pytest.mark.parametrize(("waits", "said"), [([12.0], " and waited 12% for a CPU"), (None, "")])
def test_the_peak_line_says_what_the_vcpus_waited(waits: list[float] | None, said: str) -> None:
    figures = sides.at_peak(sides.Sides(), None, [80.0], 1000.0, waits)
    line = sides.line(figures, 32)
    assert line is not None and line.endswith(f"its vCPU threads ran 80% of the time on the host{said}")
    assert figures["vcpu_wait_percent"] == waits


def test_a_run_on_a_contended_host_says_so_in_every_form(tmp_path: Path) -> None:
    """Recorded points whose baseline vCPU waited 30% for its CPU, with a control 10 points beyond its
    expectation: the report names the wait, and its JSON says the control was not judged."""
    facts = {"base": _facts("mitigations=off"), "control": _facts("mitigations=off")}
    run = RunDir.create(tmp_path / "run", {**_manifest(facts, {"cap": 50, "name": "control"}),
                                           "machines": {"server": {"machine": "srv"}, "clients": []}})
    for it in range(3):
        for name, rps, vcpu, wait in (("base", 1000.0, 60.0, 30.0), ("control", 450.0, 50.0, 5.0)):
            value = rps * ((1.0, 1.02, 0.98)[it] if name != "base" else 1.0)
            run.append({"kind": "measurement", "key": f"{name}/8/{it}", "ok": True, "instance": name,
                        "connections": 8, "iteration": it,
                        "host": {"vcpu_busy_percent": [vcpu], "vcpu_wait_percent": [wait], "window_s": 5.0},
                        "client": {"requests_per_s": value, "requests": 1000, "errors": {"total": 0},
                                   "latency_us": {"percentiles": {"50": 1.0, "90": 2.0, "99": 3.0, "99.9": 4.0}}},
                        "samples": {"srv": {"cpu": {"cpu": {"busy": 99.0}}}}})
    a = saturation.analyse(run)
    assert a.control is not None and not a.control.recovered and a.control.waited == 30.0
    assert a.flags[0].startswith("the positive control cannot be judged on this run: control (vCPUs capped to 50%) "
                                 "was expected to change throughput by -16.7% at the peak"), a.flags
    assert any("ran 60% of the time on the host at the peak: of the rest they waited 30% for a host CPU" in f
               for f in a.flags), a.flags
    text = report.text(a)
    assert "its vCPU threads ran 60% of the time on the host and waited 30% for a CPU" in text
    js = report.to_json(a)["control"]
    assert js["judged"] is False and js["baseline_vcpu_wait_percent"] == 30.0
    assert js["verdict"].startswith("cannot be judged: the baseline's vCPU threads waited up to 30%")


@pytest.mark.parametrize(("text", "seconds", "others"), [
    (_stat(500, 100) + "CPU 0/TCG 4000000000 2500000000\nCPU 1/TCG 1000000000 0\n", [2.5, 0.0], 1.0),
    (_stat(450, 0) + "qemu-system-x86 9 99\nCPU 1/KVM 1000000000 1000000000\nIO mon_iothread 5 6\ncall_rcu 1 5\n"
     "CPU 0/KVM 3000000000 3000000000\n", [3.0, 1.0], 0.5),  # any order; a name with a space is QEMU's
    ("CPU 0/TCG 5 2500000000\n", [2.5], None),  # the process's time not read: its waits stand, no QEMU time
    (_stat(1, 1).replace("ticks 100", "ticks 0"), [], None), ("total S 1 2\nticks 100\nCPU 0/TCG 5 6\n", [6e-9], None),
    ("", [], None),  # QEMU not found (its pid file gone)
    (_stat(5, 5) + "CPU 1/TCG 5 5\n", [], None),  # vCPU 0's thread missing: nothing is claimed
    (_stat(5, 5) + "CPU 0/TCG 5 5\nCPU 0/TCG 6 6\n", [], None),  # a vCPU named twice (a name a process chose)
    (_stat(5, 5) + "CPU 0/TCG 5 -5\n", [], None), (_stat(5, 5) + "CPU 0/TCG 5 5e9\n", [], None),
    (_stat(5, 5) + "CPU 0/TCG 1\n", [], None), (_stat(5, 5) + "CPU x/TCG 5 5\n", [], None),
    (_stat(5, 5) + "CPU 0/TCG 1 123456789012345678901\n", [], None),  # more digits than any counter has
])
def test_the_threads_waits_and_qemus_own_time_are_read_only_from_whole_lines(text: str, seconds: list[float],
                                                                            others: float | None) -> None:
    waits, other = running.parse_threads(text)
    assert waits == seconds
    assert other == (None if others is None else pytest.approx(others))
