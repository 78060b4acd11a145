"""The CPU each test's stream used while the test ran, beside its wall time (tests/streams.py).

On CI's two cores the suite's time is CPU: a clean clone of 4b38c71 had each stream use about one core
for its whole length, 26.6 CPU-min in the rig's 30.2 min and 28.0 in the host's 33.3 (docs/testing.md).
What a test costs the suite is then its CPU, which wall time hides: a test that waits (a deadline, a
scheduler) leaves its CPU to the other stream, a TCG guest's does not. So the launcher puts each stream
in a control group of its own, and each pytest records, per test, the CPU its group used from the test's
set-up to its teardown: the pytest and everything it started (QEMU, libvirtd and its guests, wrk,
nginx, the rig's L1), as JUnit's property `cpu_seconds`, which the summary prints.

The kernel counts it (cgroup v1's cpuacct: `cpuacct.usage`, nanoseconds), where that hierarchy is mounted
and writable (root); elsewhere the summary says CPU was not measured, and nothing else changes. Not
cgroup v2: a non-systemd libvirtd placed in a group of ours would need controllers enabled in a group
that holds processes, which v2 forbids, and could fail to start its guests. The groups are named by
the launcher's PID and removed after its streams end (one a leaked process still holds is left, said).
A daemon that was running before the stream started is not in its group: the guests of a libvirtd left
up by someone else are not counted (a clean clone beside one read the built-in experiment at 46 CPU-s
for 580 s of wall, against 456 for 541 with the tests' own libvirtd)."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path("/sys/fs/cgroup/cpuacct")
GROUP = "VMHARNESS_TEST_CPU_GROUP"  # the environment's name for the stream's group, set by the launcher
PROPERTY = "cpu_seconds"


def make(stream: str) -> tuple[Path | None, str]:
    """A group for `stream`, or None and why there is none."""
    if not (ROOT / "cpuacct.usage").is_file():
        return None, f"no cgroup v1 cpuacct hierarchy at {ROOT}"
    group = ROOT / f"vmharness-tests-{os.getpid()}-{stream}"
    try:
        group.mkdir(exist_ok=True)
    except OSError as exc:
        return None, f"{group} not made: {exc.strerror}"
    return group, ""


def remove(group: Path) -> str:
    """The group removed; or why not (a process still in it)."""
    try:
        group.rmdir()
    except OSError as exc:
        return f"{group} left: {exc.strerror} (a process of the stream still runs in it)"
    return ""


def usage(group: Path) -> float:
    """Seconds of CPU the group's processes have used."""
    return int((group / "cpuacct.usage").read_text()) / 1e9


_group: Path | None = None
_started: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Join the group the launcher named: this pytest and all it starts from here on."""
    global _group
    named = os.environ.get(GROUP)
    if not named or Path(named).parent != ROOT:
        return
    try:
        (Path(named) / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:  # the tests run as they did, without the figure
        print(f"CPU per test not measured: {named} not joined: {exc.strerror}")
        return
    _group = Path(named)


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if _group is not None:
        _started[nodeid] = usage(_group)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    if _group is not None and call.when == "teardown" and item.nodeid in _started:
        used = usage(_group) - _started.pop(item.nodeid)
        outcome.get_result().user_properties.append((PROPERTY, f"{used:.1f}"))
