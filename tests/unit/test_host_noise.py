"""A run that went round host boots, written with known numbers: the report splits the noise of each host
boot two instances shared into its three levels, plans with the host switch the records show, and says
nothing of a host boot one instance had alone, nor of a run in one host boot (vmharness/analysis/hostnoise.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vmharness.analysis import hostnoise, markdown, report, saturation
from vmharness.rundir.store import RunDir

COUNTS = (64, 128, 256)
CURVE = {"base": (600.0, 1000.0, 900.0), "mitig": (500.0, 800.0, 750.0), "other": (550.0, 900.0, 850.0)}
BOOT, SWITCH, MEASURE = 20, 45, 31  # seconds: a guest boot, a host switch beyond it, one measurement


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _run(tmp_path: Path, boots: dict[str, str], rounds: int = 6, host: float = 0.05, seed: int = 3) -> RunDir:
    """Each round: the host boots in order, each instance of one booted and measured at every count. A host
    boot shifts its instances alike (sd `host` on logs), a guest boot its own counts (0.01), a measurement
    itself (0.005)."""
    cfg: dict[str, Any] = {"instance": [{"name": n, "host_boot": b} for n, b in boots.items()],
                           "server": {"workers": 0}, "sweep": {"duration": 30, "wait": 1}}
    if any(boots.values()):
        cfg["host_boot"] = [{"name": b} for b in sorted({b for b in boots.values() if b})]
    run = RunDir.create(tmp_path / "run", {"config": cfg, "machines": {"server": {"machine": "srv"},
                                                                        "clients": [{"machine": "cli"}]}})
    r = np.random.default_rng(seed)
    clock = 1_800_000_000.0
    for it in range(rounds):
        for boot in sorted(set(boots.values())):
            shift = r.normal(0, host)
            clock += SWITCH if any(boots.values()) else 0
            for name in [n for n, b in boots.items() if b == boot]:
                clock += BOOT
                run.append({"kind": "session", "instance": name, "iteration": it, "ok": True, "boot_seconds": BOOT,
                            "time": _stamp(clock)})
                own = r.normal(0, 0.01)
                for count, mean in zip(COUNTS, CURVE[name], strict=True):
                    clock += MEASURE
                    rps = mean * np.exp(shift + own + r.normal(0, 0.005))
                    run.append({"kind": "measurement", "key": f"{name}/{count}/{it}", "ok": True, "instance": name,
                                "connections": count, "iteration": it, "time": _stamp(clock),
                                "client": {"requests_per_s": float(rps), "requests": int(rps * 30),
                                           "errors": {"total": 0},
                                           "latency_us": {"percentiles": {"50": 100, "90": 200, "99": 400,
                                                                          "99.9": 800}}},
                                "samples": {"srv": {"cpu": {"cpu": {"busy": 99.0}}}}})
    return run


def test_a_host_boot_two_instances_shared_is_split_in_three_levels(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, {"base": "a", "mitig": "a", "other": "b"}))
    assert [(h.boot, h.instances) for h in a.host_noise] == [("a", ("base", "mitig"))]  # b: one instance alone
    h = a.host_noise[0]
    assert (h.levels.host_boots, h.levels.instances, h.levels.counts) == (6, 2, 3)
    assert h.switch_seconds == pytest.approx(SWITCH, abs=1)  # from the records' times, less the guest's boot
    host, guest, own = h.levels.shares()
    assert host > 0.7 and host > guest > own  # planted: 0.05, 0.01 and 0.005 on logs
    assert h.plan is not None and (h.plan.guest_boots, h.plan.repeats) == (1, 1)  # the host boots hold it
    line = hostnoise.text(h)
    assert line.startswith("noise across host boots (host boot a, 6 host boots × 2 instances × 3 counts): host boot ±")
    assert (f"for ±{h.target:.0%} at a point: {h.plan.host_boots} host boots, 1 guest boot in each, 1 measurement "
            "of each count in each guest boot") in line
    assert "a switch 45 s" in line and "6 host boots alone hold a point's mean to no better than ±" in line
    assert line in report.text(a) and line in markdown.render(a)
    assert report.to_json(a)["host_noise"][0]["plan"]["host_boots"] == h.plan.host_boots


def test_a_run_in_one_host_boot_has_no_host_level(tmp_path: Path) -> None:
    """The negative control: the same numbers, every instance in the boot the run started in (no switch,
    its rounds one host boot): no host level is claimed, though the rounds differ as much as before."""
    a = saturation.analyse(_run(tmp_path, {"base": "", "mitig": "", "other": ""}))
    assert a.host_noise == [] and "noise across host boots" not in report.text(a)
    assert report.to_json(a)["host_noise"] == []


def test_a_damaged_host_boot_in_the_manifest_claims_no_level() -> None:
    damaged: list[dict[str, Any]] = [
        {"config": {"instance": [{"name": "base", "host_boot": 3}, {"name": "m", "host_boot": "a"}]}},
        {"config": {"instance": "base"}}, {"config": []}, {}]
    assert [hostnoise.host_boots(d) for d in damaged] == [{}, {}, {}, {}]
