"""Latency through a known delay, for real: oha against nginx on this machine through a proxy that holds
every answer a fixed time (tests/integration/delay_proxy.py; this kernel has no netem). The percentiles
follow the delay, and pipelined requests share one round trip.

They hold beside other work, so they run beside the rig's stream, not in the quiet tail with
test_load.py: what they assert is the delay's size in the time the answers took, not a rate held
against a peak the same client reached moments before. Beside `stress-ng --cpu 4` on the two cores
(2026-12-05, five runs of this module) the p50 and p90 of a 10 ms delay read 11.0-11.1 and 11.3-11.4 ms,
of a 40 ms delay 41.4-41.6 and 42.0-42.4 ms (the bounds: 15 and 45), and one connection answered
47.9-48.4 requests/s one by one, 380-384 pipelined (the bounds: 30-55, and six times that)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_bench import bench, config, loads, records
from vmharness.system import proc

pytestmark = pytest.mark.integration


@pytest.fixture()
def delayed(tmp_path: Path) -> Iterator[Any]:
    """A proxy on :18313 to nginx on :18312 that adds `delay_ms` to every answer; returns a starter."""
    started: list[subprocess.Popen[bytes]] = []

    def start(delay_ms: float) -> None:
        for old in started:  # one proxy at a time on the port
            proc.stop(old, grace=2)
        p = proc.spawn([sys.executable, "-m", "tests.integration.delay_proxy", "18313", "18312", str(delay_ms)],
                       stdout=subprocess.PIPE, die_with_parent=True)
        started.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"

    yield start
    for p in started:
        proc.stop(p, grace=2)


def test_the_latency_follows_an_injected_delay(tmp_path: Path, delayed: Any) -> None:
    """p50 and p90 at 50% of the peak sit just above each injected delay, and the median moves with
    it: what oha reports is the time the answers took, to within the proxy's own scheduling (about a
    millisecond here; the histogram itself is exact to the microsecond). The p99 is the scheduler's:
    the proxy is one Python process, and on the two-core CI machine beside the rig's L1 (a QEMU at
    170% CPU) the p99 of a 10 ms delay read 21.4 and 29.9 ms while its p90 read 11.6. So the p99 is
    held above the p90 and below delay + 50 ms, which still fails a percentile read in other units or
    taken from another field."""
    p50 = {}
    for delay in (10, 40):
        delayed(delay)
        text = config(18312, 'connections = "8"\niterations = 1\nduration = 2\nwarmup = 0\nwait = 0',
                      extra="[load]\npercents = [50]\ncapacity = 0\n").replace(
            'url = "http://127.0.0.1:18312/"', 'url = "http://127.0.0.1:18313/"')
        run = tmp_path / f"run{delay}"
        res = bench(tmp_path, text, "--out", str(run))
        assert res.ok, res.stderr
        (r,) = loads(run)
        pct = r["client"]["latency_us"]["percentiles"]
        assert delay * 1000 <= pct["50"] <= (delay + 5) * 1000, (delay, pct)
        assert pct["50"] <= pct["90"] <= (delay + 5) * 1000, (delay, pct)
        assert pct["90"] <= pct["99"] <= (delay + 50) * 1000, (delay, pct)
        p50[delay] = pct["50"]
    assert 30_000 - 5_000 <= p50[40] - p50[10] <= 30_000 + 5_000, p50


def test_pipelined_requests_share_one_round_trip(tmp_path: Path, delayed: Any) -> None:
    """Through a 20 ms delay, one connection answers about 50 requests/s one by one, and about eight
    times that with eight requests pipelined: they travel, and are answered, together."""
    delayed(20)
    text = config(18312, 'connections = "1"\niterations = 1\nduration = 2\nwarmup = 0\nwait = 0',
                  extra='[[instance]]\nname = "plain"\n[[instance]]\nname = "piped"\npipeline = 8\n').replace(
        'url = "http://127.0.0.1:18312/"', 'url = "http://127.0.0.1:18313/"')
    run = tmp_path / "run"
    res = bench(tmp_path, text, "--out", str(run))
    assert res.ok, res.stderr
    rps = {r["instance"]: r["client"]["requests_per_s"] for r in records(run) if r["kind"] == "measurement"}
    assert 30 <= rps["plain"] <= 55 and rps["piped"] >= 6 * rps["plain"], rps
    (piped,) = [r for r in records(run) if r["kind"] == "measurement" and r["instance"] == "piped"]
    assert piped["raw"][0]["argv"][-2:] == ["--", "8"]
