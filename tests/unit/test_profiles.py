"""[explain] profile's answer on synthetic profiles of known answer: a kernel function made three times
dearer per request is the top grower, a variant that only serves fewer requests in the same work grows
nothing, the positive control's check says whether a cap's profile stays flat, the idle loop is left out
but an interrupt taken in it is kept, and a damaged or hostile profile is an error naming its file."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import ValuesView
from pathlib import Path
from typing import Any

import pytest

from tests.unit import profile_fixtures as fx
from vmharness.analysis import folded, profiles
from vmharness.errors import HarnessError
from vmharness.rundir import record_check


def _view(run: Path, variants: dict[str, tuple[dict[str, float], int, float]], control: str | None = None,
          extra: list[dict[str, Any]] | None = None, base: dict[str, float] | None = None) -> profiles.View:
    records = [fx.write(run, "base", dict(base or fx.BASE), 10000, 1000.0)]
    records += [fx.write(run, name, stacks, requests, rps) for name, (stacks, requests, rps) in variants.items()]
    v = profiles.view([*records, *(extra or [])], "base", run, control)
    assert v is not None
    return v


def test_a_kernel_function_three_times_dearer_is_the_top_grower(tmp_path: Path) -> None:
    v = _view(tmp_path, {"pti": (fx.scaled(fx.BASE, 1.0, enter=3.0), 10000, 900.0)})
    top, *rest = v.growers["pti"]
    assert top.function == "syscall_enter_from_user_mode_[k]" and top.kernel and rest == []
    assert top.us == pytest.approx((30.0, 90.0))  # 300 and 900 ms over 10000 requests
    assert top.share[0] == pytest.approx(300 / 8000) and top.share[1] == pytest.approx(900 / 8600)
    assert top.p < 1e-6
    said = profiles.lines(v)
    assert said[0].startswith("what grew per request in the server's profile at 8 connections")
    assert said[1] == ("  pti: grew most per request: syscall_enter_from_user_mode (kernel) +60.0 µs "
                       "(share 3.8% -> 10.5%)")


def test_growth_is_per_request_not_per_point(tmp_path: Path) -> None:
    """The same work for half the requests at half the rate: every function twice as dear per request,
    none of them a larger share of the work: nothing grew."""
    v = _view(tmp_path, {"slow": (fx.scaled(fx.BASE, 1.0), 5000, 500.0)})
    assert v.growers == {"slow": ()}
    base, slow = v.profiles
    assert slow.us(slow.leaves["tcp_recvmsg_[k]"]) == pytest.approx(2 * base.us(base.leaves["tcp_recvmsg_[k]"]))
    assert profiles.lines(v)[1] == "  slow: nothing grew"


def test_the_control_grows_nothing_in_the_kernel_and_says_so(tmp_path: Path) -> None:
    """Negative control: a cap makes every stack 1.5 times dearer per request (uniformly): nothing grew."""
    v = _view(tmp_path, {"capped": (fx.scaled(fx.BASE, 1.5), 10000, 600.0),
                         "pti": (fx.scaled(fx.BASE, 1.0, enter=3.0), 10000, 900.0)}, control="capped")
    assert v.growers["capped"] == () and v.control == "capped" and profiles.control_flag(v) is None
    assert ("  control: no function of the guest's kernel grew per request (its cost is outside the guest, as it "
            "must be): the profiles' negative control holds") in profiles.lines(v)


def test_the_guests_background_is_left_out(tmp_path: Path) -> None:
    """What the guest does each second whatever its load (a sampler's fork and exec, here) is a larger share
    of a slower variant's time per request: a variant that serves half the requests with the same work
    per request grows nothing, though its background doubled per request; it is not the server's work."""
    background = "bash;[unknown];[ld-linux-x86-64.so.2]"
    irqbalance = "irqbalance;[unknown];__poll"  # a name with irq in it is no interrupt
    base: dict[str, float] = {**fx.BASE, background: 2000, irqbalance: 400}
    half = {s: n * (1 if s in (fx.IDLE, background, irqbalance) else 0.5) for s, n in base.items()}
    v = _view(tmp_path, {"slow": (half, 5000, 500.0)}, base=base)
    assert v.growers == {"slow": ()}
    got = profiles.to_json(v)
    assert got is not None and got["instances"]["slow"]["background_us_per_request"] == pytest.approx(
        2 * got["instances"]["base"]["background_us_per_request"])
    assert all(not folded.served(s) for s in (background, irqbalance, fx.IDLE))
    assert all(folded.served(s) for s in (fx.ENTER, fx.SOFTIRQ, fx.IDLE_IRQ))


def test_a_kernel_grower_in_the_control_is_a_warning_naming_it(tmp_path: Path) -> None:
    v = _view(tmp_path, {"capped": (fx.scaled(fx.BASE, 1.5, read=3.0), 10000, 600.0)}, control="capped")
    flag = profiles.control_flag(v)
    assert flag is not None and flag.startswith("control: tcp_recvmsg grew per request in the guest's kernel under "
                                                "capped") and "cannot tell a mitigation's cost from noise" in flag
    assert f"  {flag}" in profiles.lines(v)
    # a user function that grew is no fault of the control's kernel
    user = _view(tmp_path / "u", {"capped": (fx.scaled(fx.BASE, 1.5, parse=2.0), 10000, 600.0)}, control="capped")
    assert user.growers["capped"] and profiles.control_flag(user) is None


def test_the_idle_loop_is_left_out_and_an_interrupt_taken_in_it_kept(tmp_path: Path) -> None:
    assert folded.idle(fx.IDLE) and not folded.idle(fx.IDLE_IRQ) and not folded.idle(fx.ENTER)
    assert not folded.idle("swapper;do_idle_[k];cpuidle_enter_[k];__do_softirq_[k];run_timer_softirq_[k]")
    base = _view(tmp_path, {}).profiles[0]
    assert fx.IDLE not in base.work and fx.IDLE_IRQ in base.work
    assert base.idle_ns == 20000 * fx.PERIOD
    assert base.leaves["net_rx_action_[k]"] == (700 + 500) * fx.PERIOD  # ksoftirqd's and the idle loop's
    # the idle loop's time changes no share: a busier guest with the same work per request grows nothing
    busy: dict[str, float] = {**fx.BASE, fx.IDLE: 100}
    assert _view(tmp_path / "b", {"busy": (busy, 10000, 1000.0)}).growers == {"busy": ()}


def test_the_profilers_cost_is_set_beside_the_unprofiled_points(tmp_path: Path) -> None:
    """Against the points of its own boot at its count (the profile's is boot 0), else those of every boot:
    a run's boots differ by more than the profiler costs."""
    extra = [fx.measurement("base", 8, it, rps) for it, rps in enumerate((1040.0, 1060.0, 2000.0))]
    extra += [fx.measurement("base", 16, 0, 5000.0)]  # another count: not the profiled point's
    extra += [fx.measurement("pti", 8, it, rps) for it, rps in ((1, 880.0), (2, 920.0))]  # none in pti's boot
    v = _view(tmp_path, {"pti": (fx.scaled(fx.BASE, 1.0), 10000, 900.0)}, extra=extra)
    assert v.profiles[0].cost == pytest.approx(1000 / 1040 - 1) and v.profiles[1].cost == pytest.approx(0.0)
    assert ("  profiling changed throughput against the unprofiled points at that count: base -3.8%, pti +0.0% "
            "(kept out of every other figure)") in profiles.lines(v)
    got = profiles.to_json(v)
    assert got is not None and got["instances"]["base"]["profiling_cost"] == pytest.approx(-0.0385, abs=1e-4)
    assert got["growers"] == {"pti": []} and got["control"] is None
    assert got["instances"]["base"]["top"][0] == {"function": "ngx_http_parse_request_line", "kernel": False,
                                                  "us_per_request": 300.0, "share": 0.375}


@pytest.mark.parametrize(("profiled", "plain", "judged"), [(35.0, 2.0, False), (2.0, 12.5, False), (9.9, 9.0, True),
                                                        (None, None, True)])
def test_a_profiling_cost_beside_other_work_is_given_with_its_wait_and_not_judged(
        tmp_path: Path, profiled: float | None, plain: float | None, judged: bool) -> None:
    """Where a vCPU thread of the profiled point, or of a plain point it is set beside, waited for a host CPU
    WAIT_LIMIT percent of the time or more, the cost is other work's as much as the profiler's: said so with
    the most that waited (a profiled point beside a rig's boot served a sixth of its boot's plain one)."""
    rec = fx.write(tmp_path, "base", dict(fx.BASE), 1000, 100.0)
    m = fx.measurement("base", 8, 0, 600.0)
    for r, w in ((rec, profiled), (m, plain)):
        if w is not None:
            r["host"] = {"vcpu_busy_percent": [90.0, 40.0], "vcpu_wait_percent": [w, 1.0]}
    v = profiles.view([rec, m], "base", tmp_path)
    assert v is not None and v.profiles[0].cost == pytest.approx(100 / 600 - 1)
    (line,) = [x for x in profiles.lines(v) if x.startswith("  profiling changed throughput")]
    most = max(w for w in (profiled, plain, 1.0) if w is not None) if profiled is not None else None
    said = f" (not to be judged: a vCPU thread waited {most or 0:.0f}% of the time for a host CPU other work held)"
    assert (said in line) is not judged and ("not to be judged" in line) is not judged, line
    got = profiles.to_json(v)
    assert got is not None and got["instances"]["base"]["profiling_cost_judged"] is judged
    assert got["instances"]["base"]["vcpu_wait_percent"] == most


@pytest.mark.parametrize("wait", [["many"], [-1.0], [float("nan")], "35"])
def test_a_damaged_wait_names_its_record(tmp_path: Path, wait: Any) -> None:
    rec = fx.write(tmp_path, "pti", dict(fx.BASE), 10000, 900.0)
    rec["host"] = {"vcpu_wait_percent": wait}
    _damaged(tmp_path, rec, r"records.jsonl: the profile record 'pti/profile/0' is damaged")


def test_an_unprofiled_baseline_compares_nothing(tmp_path: Path) -> None:
    rec = fx.write(tmp_path, "pti", dict(fx.BASE), 10000, 900.0)
    v = profiles.view([rec, {**rec, "ok": False, "instance": "base"}], "base", tmp_path)
    assert v is not None and v.growers == {} and v.profiles[0].instance == "pti"
    assert profiles.lines(v)[1] == "  base was not profiled: there is nothing to compare the profiles against"
    assert profiles.view([fx.measurement("base", 8, 0, 1.0)], "base", tmp_path) is None


def test_a_profile_record_is_checked_as_a_point() -> None:
    rec = fx.record("pti", 100, 10.0)
    assert record_check.numbers_fault(rec) is None and record_check.point_key(rec) == "pti/profile/0"
    assert record_check.fault(rec, record_check.Seen()) is None
    assert "profile.frequency" in str(record_check.numbers_fault({**rec, "profile": {"frequency": 0}}))


def _damaged(run: Path, rec: dict[str, Any], match: str) -> None:
    with pytest.raises(HarnessError, match=match):
        profiles.view([fx.write(run, "base", dict(fx.BASE), 10000, 1000.0), rec], "base", run)


@pytest.mark.parametrize("file", ["profiles/../records.jsonl", "/etc/passwd", "profiles/a/b.folded",
                                  "profiles/..folded", "profiles/x.txt", 7])
def test_a_file_outside_profiles_is_refused(tmp_path: Path, file: Any) -> None:
    rec = fx.write(tmp_path, "pti", dict(fx.BASE), 10000, 900.0)
    rec["profile"]["file"] = file
    _damaged(tmp_path, rec, r"the profile record 'pti/profile/0' names .*, not a file profiles/NAME.folded")


def test_a_file_not_its_records_is_refused(tmp_path: Path) -> None:
    rec = fx.write(tmp_path, "pti", dict(fx.BASE), 10000, 900.0)
    (tmp_path / "profiles" / "pti-0.folded").write_text(fx.text(fx.scaled(fx.BASE, 1.0, enter=3.0)))
    _damaged(tmp_path, rec, r"profiles/pti-0.folded does not match its record's digest \(profile 'pti/profile/0'\)")
    _damaged(tmp_path, {**rec, "profile": {**rec["profile"], "sha256": "abc"}}, "holds no sha256 digest")


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    rec = fx.write(tmp_path, "pti", dict(fx.BASE), 10000, 900.0)
    real = tmp_path / "profiles" / "pti-0.folded"
    os.replace(real, tmp_path / "elsewhere")
    real.symlink_to(tmp_path / "elsewhere")  # the right bytes, through a link
    _damaged(tmp_path, rec, r"profiles/pti-0.folded is a symlink: refusing to read through it")
    other = tmp_path / "other"
    (other / "real").mkdir(parents=True)
    rec = fx.write(other / "real", "pti", dict(fx.BASE), 10000, 900.0)
    fx.write(other, "base", dict(fx.BASE), 10000, 1000.0)
    os.replace(other / "profiles", other / "kept")
    (other / "profiles").symlink_to(other / "real" / "profiles")  # the folder a link
    _damaged(other, rec, r"other/profiles is a symlink")


def test_an_oversized_or_missing_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = fx.write(tmp_path, "pti", {**fx.BASE, **{f"nginx;f{i}": 1 for i in range(20)}}, 10000, 900.0)
    limit = len(fx.text(dict(fx.BASE)))  # the baseline's file is read, the variant's is over the cap
    monkeypatch.setattr(folded, "MAX_FOLDED", limit)
    _damaged(tmp_path, rec, rf"pti-0.folded is larger than {limit} bytes: refusing to read it")
    monkeypatch.undo()
    (tmp_path / "profiles" / "pti-0.folded").unlink()
    _damaged(tmp_path, rec, r"pti-0.folded is missing")
    os.mkfifo(tmp_path / "profiles" / "pti-0.folded")  # would block a reader forever
    _damaged(tmp_path, rec, r"pti-0.folded is a FIFO, not a regular file")


@pytest.mark.parametrize("line", ["nginx;main", "nginx;main 12abc", "nginx;;main 5", " 5", "nginx;main -5",
                                  "nginx;main " + "9" * 30, "nginx;main ５"])
def test_a_malformed_line_names_the_file_and_line(tmp_path: Path, line: str) -> None:
    import hashlib

    data = f"{fx.ENTER} 1000\n{line}\n".encode()
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "pti-0.folded").write_bytes(data)
    rec = fx.record("pti", 100, 10.0, digest=hashlib.sha256(data).hexdigest())
    _damaged(tmp_path, rec, r"profiles/pti-0.folded: line 2 is not a folded stack")


def test_text_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    import hashlib

    data = f"{fx.ENTER} 1000\n".encode() + b"nginx;\xff 5\n"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "pti-0.folded").write_bytes(data)
    _damaged(tmp_path, fx.record("pti", 100, 10.0, digest=hashlib.sha256(data).hexdigest()),
             r"pti-0.folded line 2 is not UTF-8 text")


@pytest.mark.parametrize(("path", "value"), [(("client", "requests"), "many"), (("client", "requests"), 0),
                                             (("profile", "frequency"), None), (("instance",), "../evil"),
                                             (("client",), None)])
def test_a_damaged_record_names_the_file_and_the_record(tmp_path: Path, path: tuple[str, ...], value: Any) -> None:
    rec = fx.write(tmp_path, "pti", dict(fx.BASE), 10000, 900.0)
    *parents, last = path
    node = rec
    for p in parents:
        node = node[p]
    node[last] = value
    _damaged(tmp_path, rec, r"records.jsonl: the profile record 'pti/profile/0' is damaged")


class _Counted(dict[str, int]):
    """A profile's leaves that count how often all their values are gone through."""

    passes = 0

    def values(self) -> ValuesView[int]:  # type: ignore[override]
        _Counted.passes += 1
        return super().values()


def test_the_growers_go_through_each_profiles_leaves_a_fixed_number_of_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear in the leaves: their totals are summed once, not once per leaf. Summed per leaf, two profiles
    of 64,000 distinct leaves took 128 s against 2.9 s once, and 200,000 (a folded file just under its 32 MiB
    cap) about 20 minutes by the square against 8.3 s (docs/bench.md)."""
    v = _view(tmp_path, {"pti": (fx.scaled(fx.BASE, 1.0, enter=3.0), 10000, 900.0)})
    base, pti = v.profiles
    many = {f"nginx;ngx_worker;f{i}": 1000 for i in range(500)}
    base = dataclasses.replace(base, work={**base.work, **many})
    pti = dataclasses.replace(pti, work={**pti.work, **many})
    leaves = vars(profiles.Profile)["leaves"].fget
    monkeypatch.setattr(profiles.Profile, "leaves", property(lambda p: _Counted(leaves(p))))
    _Counted.passes = 0
    assert [g.function for g in profiles.growers(base, pti)] == ["syscall_enter_from_user_mode_[k]"]
    assert _Counted.passes <= 4  # a profile's total and samples: twice each at most, whatever the count of leaves


class _Looked(dict[str, Any]):
    """A record that counts how often its kind is looked at."""

    looks = 0

    def get(self, key: str, default: Any = None) -> Any:
        if key == "kind":
            _Looked.looks += 1
        return super().get(key, default)


def test_the_measurements_are_gone_through_once_whatever_the_count_of_profiles(tmp_path: Path) -> None:
    """Linear in the records: the unprofiled points are found by instance and count in one pass, not one pass
    per profile (a records file of 1,000 profiled instances and a million points was a billion looks)."""
    profiled = [fx.write(tmp_path, name, fx.scaled(fx.BASE, 1.0), 10000, 1000.0) for name in ("base", "b", "c", "d")]
    points = [_Looked(fx.measurement(name, 8, it, 1000.0)) for name in ("base", "b", "c", "d") for it in range(50)]
    _Looked.looks = 0
    v = profiles.view([*profiled, *points], "base", tmp_path)
    assert v is not None and all(p.cost == pytest.approx(0.0) for p in v.profiles)
    assert _Looked.looks <= 2 * len(points)  # the profiles' pass and the measurements' (it was 1 + 4 each)
