"""The seeds profile applied for real and reverted, checking every value comes back exactly: on a
client that is a network namespace reached over ssh, and inside a guest booted by the harness."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.netns_host import netns_host
from vmharness.host.libvirt import daemon
from vmharness.system import proc
from vmharness.system.machine import SSH_CONFIG_ENV
from vmharness.system.root import HostRoot
from vmharness.tune import apply

pytestmark = pytest.mark.integration
JOURNAL = Path("/run/vmharness/journal.jsonl")


# past `vm up`'s own --boot-timeout (300 s by default), so that a boot which never ends is said by the
# harness, with its console, not cut short here (as the project's CI once had it, at 300 s)
def vmh(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> proc.Result:
    return proc.run([sys.executable, "-m", "vmharness.cli", *args], timeout=timeout, check=False, env=env)


Reader = Callable[[list[str]], dict[str, str]]  # each path's bytes as the kernel prints them


def round_trip(target: str, iface: list[str], read_all: Reader, env: dict[str, str] | None = None,
               ) -> dict[str, Any]:
    """plan -> apply -> check the wanted values -> revert -> check the raw values are as before."""
    plan_res = vmh("tune", "plan", "--target", target, *iface, "--json", env=env)
    assert plan_res.ok, plan_res.stderr
    plan: dict[str, Any] = json.loads(plan_res.stdout)
    files = [c for c in plan["changes"] if not c["path"].startswith(("ethtool:", "service:"))]
    assert files, plan
    raw_before = read_all([c["path"] for c in files])
    applied = vmh("tune", "apply", "--target", target, *iface, env=env)
    assert applied.ok, applied.stderr + applied.stdout
    shown = vmh("tune", "show", "--target", target, *iface, "--json", env=env)
    # apply makes its own plan; the guest's interrupts may have changed since `plan` ran, so what
    # apply wrote is checked against apply's own records
    tuned = [r for r in json.loads(shown.stdout)["applied"] if not r["path"].startswith(("ethtool:", "service:"))]
    assert tuned
    applied_now = read_all([c["path"] for c in tuned])
    for c in tuned:
        now = " ".join(applied_now[c["path"]].split())
        if c["knob"] in ("rps", "irq_affinity"):
            assert int(now.replace(",", ""), 16) == int(c["after"].replace(",", ""), 16), c
        elif c["knob"] == "thp":
            assert f"[{c['after']}]" in now
        else:
            assert now == c["after"], c
    reverted = vmh("tune", "revert", "--target", target, env=env)
    assert reverted.ok, reverted.stderr + reverted.stdout
    if any(c["path"] == "service:irqbalance" for c in plan["changes"]):
        # revert starts irqbalance again last, and it moves the interrupts at once: they are its again
        raw_before = {p: v for p, v in raw_before.items() if not p.startswith("/proc/irq/")}
        tuned = [c for c in tuned if not c["path"].startswith("/proc/irq/")]
    after = read_all(sorted({*raw_before, *(c["path"] for c in tuned)}))
    assert {p: after[p] for p in raw_before} == raw_before  # byte for byte, as the kernel prints them
    for c in tuned:
        if c["path"] not in raw_before:
            assert " ".join(after[c["path"]].split()) == c["before"], c
    assert apply.pending(HostRoot.open(None)) == []  # (a guest's own records stay while it runs)
    return plan


# Each file's bytes, then a NUL (no kernel attribute holds one); a file that cannot be read ends it
READ_ALL = 'for f; do cat -- "$f" || exit 1; printf "\\0"; done'


def read_in_guest(name: str, paths: list[str]) -> dict[str, str]:
    """The files read in one `vm exec` through the guest's agent, where one each took the interpreter's
    start and a round trip to the agent for every file, three times over."""
    res = proc.run([sys.executable, "-m", "vmharness.cli", "vm", "exec", name, "--", "sh", "-c", READ_ALL, "sh",
                    *paths], timeout=120)
    texts = res.stdout.split("\0")
    assert len(texts) == len(paths) + 1 and texts[-1] == "", res.stdout[-2000:]
    return dict(zip(paths, texts[:-1], strict=True))


def test_seeds_on_a_namespace_client(tmp_path: Path) -> None:
    with netns_host("tune1", 238) as host:
        env = {**os.environ, SSH_CONFIG_ENV: str(host.ssh_config)}

        def read_all(paths: list[str]) -> dict[str, str]:
            return {p: proc.run(host.ssh_argv(["cat", p]), timeout=30).stdout for p in paths}

        plan = round_trip(f"client:{host.name}", ["--iface", host.interface], read_all, env)
    knobs = {c["knob"] for c in plan["changes"]} | {c["knob"] for c in plan["kept"]}
    assert {"rps", "rfs", "sysctl"} <= knobs
    skipped = {s["knob"]: s["why"] for s in plan["skipped"]}
    assert "host-side knob" in skipped["thp"] and "host-side knob" in skipped["ksm"]
    assert "no MSI queue interrupts" in skipped["irq_affinity"]  # a veth has none
    assert not JOURNAL.exists()


@pytest.mark.vm
def test_seeds_inside_a_guest(tmp_path: Path) -> None:
    with daemon.running():
        built = vmh("image", "build", timeout=1800)
        assert built.ok, built.stderr
        up = vmh("vm", "up", "--name", "itune")  # with its link: a virtio-net NIC to tune
        assert up.ok, up.stderr
        try:
            plan = round_trip("guest:itune", [], lambda paths: read_in_guest("itune", paths))
            state = vmh("vm", "exec", "itune", "--", "systemctl", "is-active", "irqbalance").stdout.strip()
        finally:
            down = vmh("vm", "down", "itune")
        assert down.ok, down.stderr
    assert not JOURNAL.exists()
    knobs = {c["knob"] for c in plan["changes"]}
    assert {"sysctl", "irqbalance"} <= knobs, plan
    # the virtio NIC's queue interrupts are planned; irqbalance, running until apply stops it, may
    # already have put one where the spread wants it (kept, not changed)
    spread = [c for c in plan["changes"] + plan["kept"] if c["knob"] == "irq_affinity"]
    assert spread and all(c["path"].startswith("/proc/irq/") for c in spread), plan
    assert not any("no MSI queue interrupts" in s["why"] for s in plan["skipped"]), plan
    assert state == "active"  # irqbalance was stopped for the run and started again by revert
