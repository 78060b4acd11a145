"""A riding control's explaining points (bench/explained.py): its cap holds while its loads run, and
what comes before and after them (perf's start and script, the histogram's trigger and its read-out)
runs with the guest as it booted, uncapped."""

from __future__ import annotations

from typing import Any

import pytest

from vmharness.bench import explained, plan, profile, syscalls


class _Run:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def append(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)


class _Sweep:
    """What explained's points reach of a sweep, with the guest's cap as a state the test reads."""

    def __init__(self) -> None:
        self.cap = "booted"
        self.seen: list[str] = []
        self.server_machine: Any = object()
        self.run = _Run()
        self.said: list[str] = []
        self.before_point = lambda point: setattr(self, "cap", f"capped for {point.instance}")
        self.as_booted = lambda: setattr(self, "cap", "booted")

    @property
    def say(self) -> Any:
        return self.said.append

    def measure(self, samplers: Any, point: plan.Point, srv: Any, seconds: float | None = None) -> dict[str, Any]:
        self.seen.append(f"load under {self.cap}")
        return {"ok": False, "attempts": 1, "error": "refused", "failed_attempts": []}

    def drain(self, srv: Any) -> None:
        self.seen.append(f"drain under {self.cap}")

    def pause(self, result: dict[str, Any]) -> None:
        pass


WHERE = {"key": "control/x/0", "instance": "control", "connections": 2, "iteration": 0}


def test_a_profiled_point_is_capped_for_its_load_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    sw = _Sweep()

    def take(m: Any, measure: Any, collapse: str) -> tuple[dict[str, Any], str | None]:
        sw.seen.append(f"perf starts under {sw.cap}")
        result = measure()
        sw.seen.append(f"perf script under {sw.cap}")
        return result, None

    monkeypatch.setattr(profile, "take", take)
    explained.profiled(sw, None, plan.Point(0, 2, "control", profiled=True), None, WHERE, "[1/1]")  # type: ignore[arg-type]
    assert sw.seen == ["perf starts under booted", "load under capped for control", "perf script under booted"]


def test_a_counted_point_is_capped_for_its_loads_and_drains_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    sw = _Sweep()
    monkeypatch.setattr(syscalls, "start", lambda m: sw.seen.append(f"trigger on under {sw.cap}"))

    def stop(m: Any) -> tuple[syscalls.Counts, str]:
        sw.seen.append(f"read-out under {sw.cap}")
        return syscalls.Counts({}, 0, 0), ""

    monkeypatch.setattr(syscalls, "stop", stop)

    class Srv:
        pid = 1

    explained.counted(sw, None, plan.Point(0, 2, "control", counted=True), Srv(), WHERE, "[1/1]")  # type: ignore[arg-type]
    # the shorter load refused, the point's own is not tried; each is drained
    assert sw.seen == ["trigger on under booted", "load under capped for control", "drain under capped for control",
                       "drain under capped for control", "read-out under booted"]


def test_the_cap_is_lifted_even_when_the_load_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    sw = _Sweep()

    def boom(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise KeyboardInterrupt

    sw.measure = boom  # type: ignore[method-assign]
    monkeypatch.setattr(profile, "take", lambda m, measure, collapse: (measure(), None))
    with pytest.raises(KeyboardInterrupt):
        explained.profiled(sw, None, plan.Point(0, 2, "control", profiled=True), None, WHERE, "[1/1]")  # type: ignore[arg-type]
    assert sw.cap == "booted"
