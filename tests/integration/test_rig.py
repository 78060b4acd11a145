"""The rig itself: L1 has the IOMMU, NUMA and NIC layout the harness's tests rely on."""

from __future__ import annotations

import re
import socket
import struct
import time
from pathlib import PurePosixPath

import pytest

from tests.integration.conftest import ONCE_MORE_IF_WEDGED
from tests.rig import Rig
from tests.rig.qga import AgentError
from tests.rig.timer_watch import LATE_S, overdue

pytestmark = [pytest.mark.integration, pytest.mark.vm, ONCE_MORE_IF_WEDGED]


def sh(rig: Rig, script: str) -> str:
    return rig.run(["sh", "-c", script], timeout=60, check=True).stdout


def link_name(rig: Rig, path: str) -> str:
    """The last component of what a sysfs symlink points to (a group number, a driver)."""
    target = rig.run(["readlink", "-f", path], timeout=30, check=True).stdout.strip()
    return PurePosixPath(target).name


def iommu_group(rig: Rig, bdf: str) -> str:
    return link_name(rig, f"/sys/bus/pci/devices/{bdf}/iommu_group")


def test_kernel_command_line_turns_the_iommu_on(l1: Rig) -> None:
    assert "intel_iommu=on" in sh(l1, "cat /proc/cmdline").split()


def test_a_dmar_unit_is_registered(l1: Rig) -> None:
    units = sh(l1, "ls /sys/class/iommu").split()
    assert any(u.startswith("dmar") for u in units), units


def test_iommu_groups_exist(l1: Rig) -> None:
    assert sh(l1, "ls /sys/kernel/iommu_groups").split()


def test_nic1_and_nic2_share_a_group_and_nic0_is_alone(l1: Rig) -> None:
    g0, g1, g2 = (iommu_group(l1, nic.bdf) for nic in (l1.nic0, l1.nic1, l1.nic2))
    assert g1 == g2
    assert g0 != g1
    members = sh(l1, f"ls /sys/kernel/iommu_groups/{g1}/devices").split()
    assert {l1.nic1.bdf, l1.nic2.bdf} <= set(members)


def test_nic1_and_nic2_are_functions_of_one_slot(l1: Rig) -> None:
    assert l1.nic1.bdf.endswith(".0")
    assert l1.nic2.bdf == l1.nic1.bdf[:-1] + "1"


def test_nic1_nic2_and_nic3_sit_on_numa_node_1_with_its_three_cpus(l1: Rig) -> None:
    for nic in (l1.nic1, l1.nic2, l1.nic3):
        assert sh(l1, f"cat /sys/bus/pci/devices/{nic.bdf}/numa_node").strip() == "1"
    assert sh(l1, "cat /sys/devices/system/node/online").strip() == "0-1"
    assert sh(l1, "cat /sys/devices/system/node/node1/cpulist").strip() == "1-3"


def test_each_nic_has_its_driver_and_the_vmxnet3_a_group_of_its_own(l1: Rig) -> None:
    for nic in (l1.nic0, l1.nic1, l1.nic2, l1.nic3):
        want = "vmxnet3" if nic is l1.nic3 else "e1000e"
        assert link_name(l1, f"/sys/bus/pci/devices/{nic.bdf}/driver") == want, nic
        assert sh(l1, f"cat /sys/class/net/{nic.ifname}/address").strip() == nic.mac
    group = iommu_group(l1, l1.nic3.bdf)
    assert sh(l1, f"ls /sys/kernel/iommu_groups/{group}/devices").split() == [l1.nic3.bdf]


def test_the_vmxnet3_has_a_vector_per_queue_and_an_event_vector(l1: Rig) -> None:
    # The driver asks for its vectors when the link goes up: L1 has four CPUs, so four queues
    # (each with one vector for RX and TX) and one vector for events.
    nic = l1.nic3.ifname
    listed = sh(l1, f"ip link set {nic} up && cat /proc/interrupts; ip link set {nic} down")
    labels = sorted(line.split()[-1] for line in listed.splitlines() if f"{nic}-" in line)
    assert labels == sorted([*(f"{nic}-rxtx-{i}" for i in range(4)), f"{nic}-event-4"]), labels


def test_default_route_goes_out_of_nic0(l1: Rig) -> None:
    rows = [line.split() for line in sh(l1, "cat /proc/net/route").splitlines()[1:]]
    defaults = [r for r in rows if r[1] == "00000000" and r[7] == "00000000"]
    assert [r[0] for r in defaults] == [l1.nic0.ifname]
    gateway = socket.inet_ntoa(struct.pack("<I", int(defaults[0][2], 16)))
    assert gateway == "198.18.0.254"
    assert "198.18.0.1/24" in sh(l1, f"ip -o -4 addr show dev {l1.nic0.ifname}")


def test_modules_of_the_running_kernel_are_in_the_chroot(l1: Rig) -> None:
    sh(l1, 'test -s "/lib/modules/$(uname -r)/modules.dep"')
    assert sh(l1, "uname -r").strip() == l1.release


def test_the_kernel_can_load_modules_on_demand(l1: Rig) -> None:
    sh(l1, "modprobe vfio_iommu_type1 && grep -q '^vfio_iommu_type1 ' /proc/modules")


def test_l0_root_is_visible_read_only_with_writable_scratch(l1: Rig) -> None:
    sh(l1, f"test -f {l1.repo}/vmharness/system/proc.py")
    denied = l1.run(["touch", f"{l1.repo}/.rig-write-probe"], timeout=30)
    assert denied.returncode != 0
    sh(l1, "touch /tmp/probe /var/tmp/probe /run/probe")


def test_run_reports_status_output_and_environment(l1: Rig) -> None:
    script = 'echo "out $RIG_X"; echo err >&2; exit 3'
    r = l1.run(["sh", "-c", script], timeout=30, env={"RIG_X": "1"})
    assert (r.returncode, r.stdout, r.stderr) == (3, "out 1\n", "err\n")
    assert l1.run(["cat"], timeout=30, input="fed\n").stdout == "fed\n"


def test_run_gives_up_at_its_timeout(l1: Rig) -> None:
    with pytest.raises(AgentError, match="did not finish"):
        l1.run(["sleep", "30"], timeout=1)
    assert l1.run(["true"], timeout=30).returncode == 0  # the agent is still in step


def test_files_can_be_copied_in_and_back(l1: Rig) -> None:
    data = bytes(range(256)) * 1000
    l1.put_file("/tmp/rig-copy", data, mode=0o600)
    assert l1.read_file("/tmp/rig-copy") == data
    assert sh(l1, "stat -c %a /tmp/rig-copy").strip() == "600"


def test_the_agent_is_restarted_when_it_exits(l1: Rig) -> None:
    """The agent killed by the PID read before (not a `pidof` evaluated again when the kill runs), from a
    process in a session of its own, so that neither the exec that started it nor the agent's death can
    take the killer with it; then asked until an agent answers with another PID. Beside a load of 5-6 on two
    cores the old form ended with the old PID read back after its 60 s: there each question to L1 costs
    seconds and L1's init restarts the agent a second after it exits, so the wait is now 300 s, far above
    what the restart takes, and says which agent was still answering when it fails."""
    before = sh(l1, "pidof qemu-ga").split()
    assert len(before) == 1, before
    # the killer leaves a trace of each step: beside a load its kill once never came in 300 s
    trace = "/tmp/rig-agent-killer"
    sh(l1, f"rm -f {trace}; setsid sh -c 'echo started >{trace}; sleep 0.3; echo slept >>{trace}; "
           f"kill {before[0]}; echo killed $? >>{trace}' </dev/null >/dev/null 2>&1 &")
    deadline = time.monotonic() + 300
    after = before
    while after == before and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            after = l1.run(["pidof", "qemu-ga"], timeout=30).stdout.split()
        except AgentError:
            continue  # asked while no agent was listening; the next call resynchronises
    if not after or after == before:
        steps = sh(l1, f"cat {trace} 2>&1; ps -eo pid,stat,wchan:24,etime,args | grep -E 'slee[p]|qemu-g[a]'")
        what = f"the agent {before} still answered after 300 s (the killer's steps, its processes: {steps!r})"
        l1.check_timers(what)  # a sleep on a CPU whose timer was lost never ends: L1 wedged, not the test's
        pytest.fail(l1.failure(what).message)


def test_l1s_timers_read_through_its_agent_name_each_cpu_and_none_is_lost(l1: Rig) -> None:
    """What the rig's timer watch reads (tests/rig/timer_watch.py), from the real L1: its four CPUs, and
    no timer of a healthy L1 late by LATE_S."""
    text = l1.read_file("/proc/timer_list").decode()
    assert set(re.findall(r"^cpu: (\d+)$", text, flags=re.MULTILINE)) == {"0", "1", "2", "3"}
    assert re.search(r"^Per CPU device: 3$", text, flags=re.MULTILINE), text[-2000:]
    assert all(t.late_s < LATE_S for t in overdue(text).values()), overdue(text)
