"""host-check and host-groups inside L1, a TCG guest with an emulated Intel IOMMU and e1000e NICs:
the IOMMU reported on, the multi-function pair in one group on node 1, the routed NIC in use."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import ONCE_MORE_IF_WEDGED
from tests.rig import Rig, commands

pytestmark = [pytest.mark.integration, pytest.mark.vm, ONCE_MORE_IF_WEDGED]


def vmharness(l1: Rig, *args: str) -> tuple[int, Any]:
    res = commands.vmharness(l1, *args, timeout=300)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout) if "--json" in args else res.stdout


def test_host_check_sees_the_iommu(l1: Rig) -> None:
    code, data = vmharness(l1, "host-check", "--json")
    rows = {c["name"]: c for c in data["checks"]}
    assert rows["IOMMU in firmware"]["status"] == "PASS" and "DMAR" in rows["IOMMU in firmware"]["detail"]
    assert rows["IOMMU in kernel"]["status"] == "PASS" and "dmar0" in rows["IOMMU in kernel"]["detail"]
    assert rows["IOMMU on cmdline"]["status"] == "PASS"
    assert "intel_iommu=on" in rows["IOMMU on cmdline"]["detail"]
    assert rows["interrupt remapping"]["status"] == "PASS", rows["interrupt remapping"]
    assert rows["module vfio-pci"]["status"] == "PASS", rows["module vfio-pci"]
    assert rows["module vfio_iommu_type1"]["status"] == "PASS"
    assert "node0" in rows["hugepages"]["detail"] and "node1" in rows["hugepages"]["detail"]
    assert code == (1 if any(c["status"] == "FAIL" for c in data["checks"]) else 0)


def test_host_groups_sees_the_e1000e_topology(l1: Rig) -> None:
    _, data = vmharness(l1, "host-groups", "--class", "network", "--json")
    assert data["iommu_enabled"] is True
    group_of = {d["bdf"]: g for g in data["groups"] for d in g["devices"]}
    pair = group_of[l1.nic1.bdf]
    assert group_of[l1.nic2.bdf] is pair, "both functions of the multi-function e1000e share a group"
    assert pair["multifunction"] == [sorted([l1.nic1.bdf, l1.nic2.bdf])]
    assert not pair["viable"] and {b["bdf"] for b in pair["blockers"]} == {l1.nic1.bdf, l1.nic2.bdf}
    devices = {d["bdf"]: d for d in pair["devices"]}
    for nic in (l1.nic1, l1.nic2):
        assert devices[nic.bdf]["driver"] == "e1000e"
        assert devices[nic.bdf]["numa_node"] == 1
        assert devices[nic.bdf]["vendor_id"] == "8086"
        assert devices[nic.bdf]["netdevs"] == [nic.ifname]
    routed = group_of[l1.nic0.bdf]
    assert routed is not pair
    nic0 = next(d for d in routed["devices"] if d["bdf"] == l1.nic0.bdf)
    assert "default route" in nic0["active"][l1.nic0.ifname]
    assert devices[l1.nic1.bdf]["active"] == {}


def test_host_groups_text_in_vm(l1: Rig) -> None:
    code, out = vmharness(l1, "host-groups", "--bdf", l1.nic1.bdf)
    assert code == 0
    assert "multi-function device" in out and "NOT viable" in out

