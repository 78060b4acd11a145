"""The three levels of noise (vmharness/noise_levels.py) on simulated runs that go round host boots, of
known answer: the host boots' share's interval holds the truth as often as it says (coverage_kit's
rule, streams 400-404), each level's estimate lands on its truth on average, a host level that is not
there is not found, and the plan repeats the level whose repetition buys most."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests import coverage_kit as kit
from tests.coverage_kit import LEVELS
from vmharness import noise_levels, stats, student_t

CURVE = np.log([[300.0, 500, 600, 650], [280.0, 470, 560, 600], [250.0, 430, 520, 540]])  # 3 instances x 4 counts


def runs(stream: int, n: int, hosts: int, host: float, guest: float, within: float) -> np.ndarray:
    """n runs of `hosts` host boots x 3 instances x 4 counts: each host boot shifts every instance's guest
    boot by the same draw (sd `host`), each guest boot shifts its counts (sd `guest`), and each measurement
    varies on its own (sd `within`), all on logs."""
    r = kit.rng(stream)
    shape = (n, hosts, *CURVE.shape)
    return np.exp(CURVE + r.normal(0, host, (n, hosts, 1, 1)) + r.normal(0, guest, (n, hosts, CURVE.shape[0], 1))
                  + r.normal(0, within, shape))


@LEVELS
@pytest.mark.parametrize(("hosts", "host", "guest", "within"), [(5, 0.04, 0.02, 0.01), (3, 0.01, 0.03, 0.02)],
                         ids=["host-heavy", "guest-heavy"])
def test_the_host_boots_share_holds_its_truth(hosts: int, host: float, guest: float, within: float,
                                              level: float) -> None:
    # the share of a guest boot's mean's variance (over the 4 counts) that is the host boot's
    truth = host ** 2 / (host ** 2 + guest ** 2 + within ** 2 / CURVE.shape[1])
    found = [noise_levels.split(t, level) for t in runs(400 + hosts, kit.RUNS, hosts, host, guest, within)]
    assert all(v is not None for v in found)
    kit.judge(np.array([v.boots.share_low <= truth <= v.boots.share_high for v in found if v is not None]), level)


def test_each_level_lands_on_its_truth_on_average() -> None:
    # the variances' estimators are unbiased but the guest boot's, cut at zero (it leans up a little)
    host, guest, within = 0.04, 0.02, 0.015
    found = [noise_levels.split(t) for t in runs(402, kit.RUNS, 6, host, guest, within)]
    got = {k: np.mean([getattr(v, k) ** 2 for v in found if v is not None]) for k in ("host", "guest", "within")}
    assert got["within"] == pytest.approx(within ** 2, rel=0.03)
    assert got["guest"] == pytest.approx(guest ** 2, rel=0.10)
    assert got["host"] == pytest.approx(host ** 2, rel=0.10)
    assert all(sum(v.shares()) == pytest.approx(1.0) for v in found if v is not None)


def test_no_host_level_is_found_where_there_is_none() -> None:
    """The negative control: host boots that shift nothing. Their share's interval starts at 0 in at
    least 95% of runs (the F test at 2.5% on one side), where a real host level of the guest boot's size
    moves it off 0 in most."""
    none = [noise_levels.split(t) for t in runs(403, kit.RUNS, 5, 0.0, 0.02, 0.01)]
    assert np.mean([v.boots.share_low == 0 for v in none if v is not None]) >= 0.95
    some = [noise_levels.split(t) for t in runs(404, 500, 8, 0.04, 0.02, 0.01)]
    assert np.mean([v.boots.share_low > 0 for v in some if v is not None]) >= 0.8


def _levels(host: float, guest: float, within: float, hosts: int = 4) -> noise_levels.Levels:
    boots = stats.Split(hosts, 3, host, math.sqrt(guest ** 2 + within ** 2 / 4), 0.5, 0.1, 0.9, 0.95)
    return noise_levels.Levels(hosts, 3, 4, host, guest, within, boots, 0.95)


def test_the_plan_repeats_the_level_that_buys_most() -> None:
    # the host boots hold the noise: more guest boots or measurements in one cannot narrow it
    p = noise_levels.plan(_levels(0.05, 0.005, 0.005), 0.03, switch_seconds=60, boot_seconds=30, measure_seconds=31)
    assert p is not None and (p.guest_boots, p.repeats) == (1, 1) and p.host_boots >= 10
    # the measurements hold it, and a host switch is dear: few host boots (t(1) is 12.7: not two), one
    # guest boot in each, many measurements in it
    p = noise_levels.plan(_levels(0.0, 0.0, 0.06), 0.03, switch_seconds=600, boot_seconds=30, measure_seconds=31)
    assert p is not None and p.host_boots <= 4 and p.guest_boots == 1 and p.repeats >= 5
    # the guest boots hold it, and a boot is cheap against a switch: several guest boots in each host boot
    p = noise_levels.plan(_levels(0.0, 0.06, 0.001), 0.03, switch_seconds=600, boot_seconds=10, measure_seconds=31)
    assert p is not None and p.host_boots <= 4 and p.guest_boots >= 5 and p.repeats == 1
    # out of reach within the bounds
    assert noise_levels.plan(_levels(1.0, 1.0, 1.0), 0.001, 60, 30, 31) is None


def test_the_floor_is_the_host_boots_own_part() -> None:
    v = _levels(0.04, 0.01, 0.01, hosts=4)
    t = float(student_t.special().stdtrit(3, 0.975))
    assert noise_levels.floor(v) == pytest.approx(math.expm1(t * 0.04 / 2))


@pytest.mark.parametrize("shape", [(1, 3, 4), (4, 1, 4), (4, 3, 1), (4, 3)], ids=["one host boot", "one instance",
                                                                                  "one count", "two axes"])
def test_a_table_that_cannot_tell_the_levels_apart_gives_none(shape: tuple[int, ...]) -> None:
    assert noise_levels.split(np.full(shape, 100.0) + np.arange(int(np.prod(shape))).reshape(shape)) is None


def test_a_table_with_a_zero_or_a_nan_gives_none() -> None:
    t = runs(400, 1, 4, 0.01, 0.01, 0.01)[0]
    assert noise_levels.split(t) is not None
    for bad in (0.0, float("nan"), -1.0):
        damaged = t.copy()
        damaged[1, 1, 1] = bad
        assert noise_levels.split(damaged) is None
