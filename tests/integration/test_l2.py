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
from tests.rig.failures import Wedged, once_more
from tests.rig.l2 import CHIPSET, L2Error, PciDevice, boot_l2, guest_bdf
from tests.rig.session import SessionRig

pytestmark = [pytest.mark.integration, pytest.mark.vm, pytest.mark.slow]

log = logging.getLogger(__name__)

L2_MIB = 128


@dataclass(frozen=True)
class Prepared:
    rig: Rig  # the L1 prepared: the module's, or a fresh one where that one wedged while being prepared
    group: str
    node: int  # NUMA node of the group, where the hugepages are
    mem_path: str


def vmharness(rig: Rig, *args: str) -> str:
    res = commands.vmharness(rig, *args, timeout=600)
    assert res.ok and "Traceback" not in res.stderr, res.stdout + res.stderr
    return res.stdout


def prepared(rig: Rig) -> Prepared:
    """`rig` prepared by the harness itself: nic1's whole group on vfio-pci, hugepages on its node,
    hugetlbfs mounted; given back where the preparation fails, unless L1 wedged (then it is stopped)."""
    plan = json.loads(vmharness(rig, "host-prepare", "--bdf", rig.nic1.bdf, "--hugepages", f"{L2_MIB}M",
                                "--dry-run", "--json"))
    try:
        vmharness(rig, "host-prepare", "--bdf", rig.nic1.bdf, "--hugepages", f"{L2_MIB}M")
    except BaseException:
        if rig.usable:
            vmharness(rig, "host-restore")
        raise
    return Prepared(rig, str(plan["groups"][0]), plan["hugepages"]["node"], plan["mount"] or plan["mount_existing"])


@pytest.fixture(scope="module")
def vfio_l1(session_rig: SessionRig) -> Iterator[Prepared]:
    """L1 prepared for VFIO, and `host-restore` at the end whatever happened. Where L1 wedges while it is
    prepared, the preparation goes once more on a fresh L1 (a clean clone of f0d4fa9 lost this module to
    an unbind in `host-prepare` that never ended in L1's kernel: docs/testing.md, 2026-12-04 evening)."""
    began = time.monotonic()
    try:
        ready = prepared(session_rig.usable())
    except Wedged as exc:
        once_more(exc)  # the wedged L1 is stopped already
        ready = prepared(session_rig.usable())
    log.info("L1 prepared for VFIO in %.1f s", time.monotonic() - began)
    try:
        yield ready
    finally:
        if ready.rig.usable:  # a wedged L1 is stopped with all it held (Rig.unload_kvm), and the next module's is fresh
            vmharness(ready.rig, "host-restore")
    log.info("preparation, L2 and restoring L1 took %.1f s", time.monotonic() - began)


@pytest.fixture()
def kvm_in_l1(vfio_l1: Prepared) -> Iterator[None]:
    with vfio_l1.rig.kvm():
        yield


def no_qemu_in_l1(rig: Rig) -> bool:
    return rig.run(["pidof", "qemu-system-x86_64"], timeout=30).returncode == 1


def test_a_function_left_to_its_driver_fails_with_qemu_s_reason(vfio_l1: Prepared) -> None:
    l1 = vfio_l1.rig
    with pytest.raises(L2Error, match=r"(?s)status 1 before.*stderr ---\n.*vfio"):
        boot_l2(l1, bdfs=[l1.nic0.bdf], mem_path=vfio_l1.mem_path, mem_mib=L2_MIB, timeout=120)
    assert no_qemu_in_l1(l1)


def test_an_l2_past_its_timeout_is_stopped(vfio_l1: Prepared) -> None:
    l1 = vfio_l1.rig
    with pytest.raises(L2Error, match="did not exit within 10 s"):
        boot_l2(l1, bdfs=[l1.nic1.bdf], mem_path=vfio_l1.mem_path, mem_mib=L2_MIB, timeout=10)
    assert no_qemu_in_l1(l1)


def test_l2_sees_the_passed_through_e1000e_and_only_the_chipset(vfio_l1: Prepared, kvm_in_l1: None) -> None:
    l1 = vfio_l1.rig
    assert vfio_l1.node == 1
    result = boot_l2(l1, bdfs=[l1.nic1.bdf], mem_path=vfio_l1.mem_path, mem_mib=L2_MIB, host_node=vfio_l1.node,
                     accel="kvm")
    log.info("L2: marker at %.1f s of its uptime; its QEMU ran %.1f s", result.uptime, result.seconds)
    assert result.assigned == {l1.nic1.bdf: guest_bdf(0)}
    assert result.at(guest_bdf(0)) == PciDevice(guest_bdf(0), "8086", "10d3", 0x020000)  # 82574L, Ethernet
    assert set(result.devices) == {*CHIPSET, result.at(guest_bdf(0))}
    assert no_qemu_in_l1(l1)
