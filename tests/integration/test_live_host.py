"""The commands on this machine's real sysfs and procfs, and the snapshot round trip."""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from vmharness.system import proc

pytestmark = pytest.mark.integration


def vmharness(*args: str, root: str | None = None) -> proc.Result:
    env = {"VMHARNESS_HOST_ROOT": root} if root else None
    return proc.run([sys.executable, "-m", "vmharness", *args], timeout=120, check=False, env=env)


def live_has_iommu() -> bool:
    return bool(os.listdir("/sys/class/iommu")) if os.path.isdir("/sys/class/iommu") else False


def test_host_check_live_json_is_consistent_with_sysfs() -> None:
    res = vmharness("host-check", "--json")
    assert res.returncode in (0, 1), res.stderr
    data = json.loads(res.stdout)
    rows = {c["name"]: c for c in data["checks"]}
    assert res.returncode == (1 if any(c["status"] == "FAIL" for c in data["checks"]) else 0)
    kernel = rows["IOMMU in kernel"]
    if live_has_iommu():
        assert kernel["status"] == "PASS"
    else:
        # this machine: no IOMMU at all, and host-check must say so plainly
        assert kernel["status"] == "FAIL"
        assert "no IOMMU registered" in kernel["detail"]
        assert rows["IOMMU in firmware"]["status"] in ("FAIL", "PASS")
    assert rows["QEMU"]["status"] == "PASS", "make test installs qemu-system-x86"
    assert rows["/dev/kvm"]["status"] == ("PASS" if os.path.exists("/dev/kvm") else "FAIL")
    assert rows["KVM usable"]["status"] in ("PASS", "FAIL") and rows["KVM usable"]["detail"]


def test_host_groups_live_lists_every_pci_device() -> None:
    res = vmharness("host-groups", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    listed = {d["bdf"] for g in data["groups"] for d in g["devices"]} | {d["bdf"] for d in data["ungrouped"]}
    assert listed == set(os.listdir("/sys/bus/pci/devices"))
    text = vmharness("host-groups").stdout
    if not live_has_iommu():
        assert text.startswith("no IOMMU groups: the kernel has no IOMMU enabled")


def differing(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What two JSON answers disagree in: host-check's rows by name, else the top-level keys."""
    rows = [{c["name"]: c for c in d.get("checks", [])} for d in (a, b)]
    keys = set(rows[0]) | set(rows[1])
    found = {k: (rows[0].get(k), rows[1].get(k)) for k in sorted(keys) if rows[0].get(k) != rows[1].get(k)}
    return found | {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if k != "checks" and a.get(k) != b.get(k)}


def test_snapshot_round_trip_gives_identical_json(tmp_path: Path) -> None:
    """A snapshot answers as the host did when it was taken. The host stream runs beside the rig's
    (tests/streams.py), whose work may change this host in between: the snapshot is held against the
    host's answer just before and just after it was taken, and taken again (up to three times) when those
    two differ, as a snapshot_compare does; the failure names only what differs."""
    out = tmp_path / "host.tar.gz"
    for cmd in (["host-groups", "--json"], ["host-check", "--json"]):
        for _ in range(3):
            before = vmharness(*cmd)
            res = vmharness("host-snapshot", str(out))
            assert res.returncode == 0, res.stderr
            after = vmharness(*cmd)
            if before.returncode == after.returncode and json.loads(before.stdout) == json.loads(after.stdout):
                break
        assert out.stat().st_size < 512 * 1024
        snap = tmp_path / f"snap{cmd[0]}"
        snap.mkdir()
        with tarfile.open(out) as t:
            t.extractall(snap, filter="tar")
        copy = vmharness(*cmd, "--host-root", str(snap))
        held = [json.loads(r.stdout) for r in (before, after) if r.returncode == copy.returncode]
        got = json.loads(copy.stdout)
        assert got in held, (cmd, differing(got, json.loads(before.stdout)))
    # the environment variable names the root as well as the flag does
    via_env = vmharness("host-groups", "--json", root=str(tmp_path / "snaphost-groups"))
    via_flag = vmharness("host-groups", "--json", "--host-root", str(tmp_path / "snaphost-groups"))
    assert via_env.returncode == 0 and json.loads(via_env.stdout) == json.loads(via_flag.stdout)
