"""The commands on this machine's real sysfs and procfs, and the snapshot round trip."""

from __future__ import annotations

import json
import os
import sys
import tarfile
from pathlib import Path

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


def test_snapshot_round_trip_gives_identical_json(tmp_path: Path) -> None:
    out = tmp_path / "host.tar.gz"
    res = vmharness("host-snapshot", str(out))
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size < 512 * 1024
    snap = tmp_path / "snap"
    snap.mkdir()
    with tarfile.open(out) as t:
        t.extractall(snap, filter="tar")
    for cmd in (["host-groups", "--json"], ["host-check", "--json"]):
        live, copy = vmharness(*cmd), vmharness(*cmd, "--host-root", str(snap))
        assert copy.returncode == live.returncode, cmd
        assert json.loads(copy.stdout) == json.loads(live.stdout), cmd
    # the environment variable names the root as well as the flag does
    via_env = vmharness("host-groups", "--json", root=str(snap))
    assert json.loads(via_env.stdout) == json.loads(vmharness("host-groups", "--json").stdout)
