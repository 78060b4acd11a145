"""L2 inside L1 with nic1 passed through by VFIO, after `vmharness host-prepare` bound its group and
reserved hugepages on its node: the e1000e function reaches L2, and nothing else does beyond the q35
chipset. That L2 runs under KVM in L1 (kvm_amd loaded for it: L0's TCG emulates SVM with nested
paging), as the researcher's guest would: under TCG inside TCG it took 308-415 s of the rig's stream
beside the host's (docs/testing.md). The L2 that must outlive its timeout stays under double TCG,
which no machine here boots within 10 s. The L2 under KVM goes last: unloading KVM after it is where
an L1 hung (`Rig.unload_kvm`), and a wedged L1 is stopped, so it would take the tests after it along."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.rig import Rig, commands
from tests.rig.l2 import CHIPSET, L2Error, PciDevice, boot_l2, guest_bdf

pytestmark = [pytest.mark.integration, pytest.mark.vm, pytest.mark.slow]

log = logging.getLogger(__name__)

L2_MIB = 128


@dataclass(frozen=True)
class Prepared:
    group: str
    node: int  # NUMA node of the group, where the hugepages are
    mem_path: str


def vmharness(rig: Rig, *args: str) -> str:
    res = commands.vmharness(rig, *args, timeout=600)
    assert res.ok and "Traceback" not in res.stderr, res.stdout + res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def vfio_l1(l1: Rig) -> Iterator[Prepared]:
    """L1 prepared by the harness itself: nic1's whole group on vfio-pci, hugepages on its node,
    hugetlbfs mounted; host-restore at the end, whatever happened."""
    began = time.monotonic()
    plan = json.loads(vmharness(l1, "host-prepare", "--bdf", l1.nic1.bdf, "--hugepages", f"{L2_MIB}M",
                                "--dry-run", "--json"))
    try:
        vmharness(l1, "host-prepare", "--bdf", l1.nic1.bdf, "--hugepages", f"{L2_MIB}M")
        mem_path = plan["mount"] or plan["mount_existing"]
        log.info("L1 prepared for VFIO in %.1f s", time.monotonic() - began)
        yield Prepared(str(plan["groups"][0]), plan["hugepages"]["node"], mem_path)
    finally:
        if l1.usable:  # a wedged L1 is stopped with all it held (Rig.unload_kvm), and the next module's is fresh
            vmharness(l1, "host-restore")
    log.info("preparation, L2 and restoring L1 took %.1f s", time.monotonic() - began)


@pytest.fixture()
def kvm_in_l1(l1: Rig) -> Iterator[None]:
    with l1.kvm():
        yield


def no_qemu_in_l1(rig: Rig) -> bool:
    return rig.run(["pidof", "qemu-system-x86_64"], timeout=30).returncode == 1


def test_a_function_left_to_its_driver_fails_with_qemu_s_reason(l1: Rig, vfio_l1: Prepared) -> None:
    with pytest.raises(L2Error, match=r"(?s)status 1 before.*stderr ---\n.*vfio"):
        boot_l2(l1, bdfs=[l1.nic0.bdf], mem_path=vfio_l1.mem_path, mem_mib=L2_MIB, timeout=120)
    assert no_qemu_in_l1(l1)


def test_an_l2_past_its_timeout_is_stopped(l1: Rig, vfio_l1: Prepared) -> None:
    with pytest.raises(L2Error, match="did not exit within 10 s"):
        boot_l2(l1, bdfs=[l1.nic1.bdf], mem_path=vfio_l1.mem_path, mem_mib=L2_MIB, timeout=10)
    assert no_qemu_in_l1(l1)


def test_l2_sees_the_passed_through_e1000e_and_only_the_chipset(l1: Rig, vfio_l1: Prepared, kvm_in_l1: None) -> None:
    assert vfio_l1.node == 1
    result = boot_l2(l1, bdfs=[l1.nic1.bdf], mem_path=vfio_l1.mem_path, mem_mib=L2_MIB, host_node=vfio_l1.node,
                     accel="kvm")
    log.info("L2: marker at %.1f s of its uptime; its QEMU ran %.1f s", result.uptime, result.seconds)
    assert result.assigned == {l1.nic1.bdf: guest_bdf(0)}
    assert result.at(guest_bdf(0)) == PciDevice(guest_bdf(0), "8086", "10d3", 0x020000)  # 82574L, Ethernet
    assert set(result.devices) == {*CHIPSET, result.at(guest_bdf(0))}
    assert no_qemu_in_l1(l1)
