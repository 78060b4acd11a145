"""1 GiB guest pages with a libvirt daemon that is already running, for real, in the rig's L1 (whose
`-cpu max` has pdpe1gb, so its kernel offers 1 GiB pages; it boots with one reserved on node 1, as
the README's checklist has a real host do: none could be had at run time in L1).

A libvirtd started before host-prepare mounts the 1G hugetlbfs does not list it: host-prepare says so,
`vm up` refuses with the command that restarts that daemon, and that command, run as printed, makes
libvirt start (paused: L2 need not boot) the harness's domain with its memory on the 1 GiB page, in
the mount host-prepare made. A libvirtd that `python -m vmharness.host.libvirt.daemon` started is restarted
by the harness instead. host-restore then leaves L1 as it was."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

from tests.integration.conftest import ONCE_MORE_IF_WEDGED
from tests.integration.test_run_nested import host_state, in_l1, libvirt_in_l1
from tests.rig import Rig, commands

pytestmark = [pytest.mark.integration, pytest.mark.vm, ONCE_MORE_IF_WEDGED]

PAGES = "/sys/devices/system/node/node1/hugepages/hugepages-1048576kB"
MOUNT = "/run/vmharness/hugepages-1G"
DRIVER_PID = "/run/libvirt/qemu/driver.pid"
PREPARE = ("host-prepare", "--hugepages", "1G", "--hugepage-size", "1G", "--node", "1")
ENSURE = """
from vmharness.host.libvirt import hugetlbfs
from vmharness.host.libvirt import daemon
from vmharness.system.root import HostRoot
print(daemon.owned_pid())
print(hugetlbfs.ensure(HostRoot.open(), 1 << 20, "1G"))
"""


def vm_up(l1: Rig, *extra: str) -> list[str]:
    return ["vm", "up", "--name", "hp", "--bdf", l1.nic1.bdf, "--managed",
            "--hugepages", "--hugepage-size", "1G", "--memory", "1024", "--no-link", "--accel", "tcg", *extra]


def driver_pid(l1: Rig, not_this: str = "", timeout: float = 120) -> str:
    """The PID of the daemon holding libvirt's QEMU driver, once one (other than `not_this`) answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = in_l1(l1, "sh", "-c", f"cat {DRIVER_PID} 2>/dev/null && virsh -c qemu:///system version >/dev/null"
                    ).stdout.strip()
        if pid.isdigit() and pid != not_this:
            return pid
        time.sleep(1)
    raise AssertionError(f"no libvirtd answered in L1 within {timeout:g} s")


def paused_domain(l1: Rig, xml_text: str) -> str:
    """The harness's domain for the guest, started paused. Left out: its disk (an overlay only `vm up`
    makes) and the NIC (L1 keeps it), <locked/> (QEMU would lock its whole TCG cache into node 1's
    half GiB beside the page) and most of that cache; the kernel is the rig's."""
    dom = ET.fromstring(xml_text)
    devices, os_el, backing = dom.find("devices"), dom.find("os"), dom.find("memoryBacking")
    assert devices is not None and os_el is not None and backing is not None, xml_text
    page = backing.find("hugepages/page")
    assert page is not None and page.get("size") == str(1 << 20), "the harness asks libvirt for 1 GiB pages"
    for parent, tag in ((devices, "disk"), (devices, "hostdev"), (backing, "locked"), (os_el, "initrd")):
        for el in parent.findall(tag):
            parent.remove(el)
    kernel, cache = os_el.find("kernel"), dom.find("features/tcg/tb-cache")
    assert kernel is not None and cache is not None
    kernel.text, cache.text = str(l1.kernel.boot_image), "32"
    log = devices.find("serial/log")
    assert log is not None
    in_l1(l1, "mkdir", "-p", log.get("file", "").rpartition("/")[0])
    return ET.tostring(dom, encoding="unicode")


def pages(l1: Rig) -> tuple[int, int]:
    """Free 1G pages on node 1, and 1G pages reserved for mappings (a shared mapping reserves them)."""
    free = l1.read_file(f"{PAGES}/free_hugepages").decode()
    resv = l1.read_file("/sys/kernel/mm/hugepages/hugepages-1048576kB/resv_hugepages").decode()
    return int(free), int(resv)


def stop(l1: Rig, pid: str) -> None:
    """A daemon this test started in L1, by its PID; returns once it has exited."""
    if pid.isdigit():
        in_l1(l1, "sh", "-c", 'kill "$1" 2>/dev/null; i=0; while kill -0 "$1" 2>/dev/null && [ $i -lt 150 ]; '
              'do sleep 0.2; i=$((i+1)); done', "sh", pid)


def test_1g_pages_with_a_running_libvirtd_refuse_then_work_once_it_is_restarted(l1: Rig) -> None:
    assert in_l1(l1, "test", "-d", PAGES).ok, "L1 has no 1 GiB pages: QEMU's -cpu max lacks pdpe1gb"
    libvirt_in_l1(l1)
    before = host_state(l1)
    began = time.monotonic()
    assert in_l1(l1, "pidof", "virtlogd", "libvirtd").returncode == 1, "no libvirt daemon runs in L1 yet"
    logd = ""
    try:
        # stdio away from the agent's pipes, so that the command ends when the daemons are up
        assert in_l1(l1, "sh", "-c", "{ virtlogd -d && libvirtd -d; } </dev/null >/dev/null 2>&1").ok
        logd = in_l1(l1, "pidof", "virtlogd").stdout.strip()
        old = driver_pid(l1)
        prepared = commands.vmharness(l1, *PREPARE)
        assert prepared.ok, prepared.stdout + prepared.stderr
        print(prepared.stdout, prepared.stderr, sep="\n")
        assert f"libvirt: libvirtd (pid {old}) started before the 1G hugetlbfs at {MOUNT} is mounted: it will " \
               "not see it" in prepared.stdout
        assert "hugepages: node 1, 1G pages 1 (enough already); 1 free for the guest" in prepared.stdout
        assert f"mounted hugetlbfs (pagesize 1G) on {MOUNT}" in prepared.stderr
        assert pages(l1) == (1, 0)

        refused = commands.vmharness(l1, *vm_up(l1))
        print(refused.stderr)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        error, hint = refused.stderr.strip().splitlines()[-2:]
        assert error == f"error: libvirtd (pid {old}) started before the 1G hugetlbfs at {MOUNT} was mounted: it " \
                        "does not see it"
        fix = hint.removeprefix("hint: restart it: ")
        assert fix == f"kill {old} && while kill -0 {old} 2>/dev/null; do sleep 0.2; done && libvirtd -d", hint
        assert in_l1(l1, "sh", "-c", f"{{ {fix}; }} </dev/null >/dev/null 2>&1").ok, "the fix, run as printed"
        new = driver_pid(l1, not_this=old)

        planned = commands.vmharness(l1, *vm_up(l1, "--print-xml"))
        assert planned.ok, planned.stderr
        assert f"note: libvirt: libvirtd (pid {new}) sees the 1G hugetlbfs at {MOUNT}" in planned.stderr
        l1.put_file("/tmp/hp.xml", paused_domain(l1, planned.stdout).encode())
        assert in_l1(l1, "virsh", "-c", "qemu:///system", "define", "/tmp/hp.xml").ok
        started = in_l1(l1, "virsh", "-c", "qemu:///system", "start", "--paused", "vmh-hp", timeout=300)
        assert started.ok, started.stderr
        qemu = l1.read_file("/run/libvirt/qemu/vmh-hp.pid").decode().strip()
        maps = l1.read_file(f"/proc/{qemu}/maps").decode()
        assert f" {MOUNT}/libvirt/qemu/" in maps, "QEMU's memory is a file in the mount host-prepare made"
        free, resv = pages(l1)
        assert free == 0 or resv == 1, "the 1 GiB page is QEMU's"
        print(f"paused domain on the 1G page (free {free}, reserved {resv}) after {time.monotonic() - began:.0f} s")
    finally:
        in_l1(l1, "virsh", "-c", "qemu:///system", "destroy", "vmh-hp")
        in_l1(l1, "virsh", "-c", "qemu:///system", "undefine", "vmh-hp")
        in_l1(l1, "rm", "-rf", "/var/lib/vmharness/vms/hp", "/tmp/hp.xml")
        stop(l1, in_l1(l1, "sh", "-c", f"cat {DRIVER_PID} 2>/dev/null").stdout.strip())
        stop(l1, logd)
        restored = commands.vmharness(l1, "host-restore")
    assert restored.ok and "restored: the host is as vmharness found it" in restored.stdout, restored.stdout
    assert host_state(l1) == before


def test_a_libvirtd_vmharness_started_is_restarted_to_see_a_later_mount(l1: Rig) -> None:
    vmh = str(l1.repo / ".venv/bin/vmharness")
    python = str(l1.repo / ".venv/bin/python")
    libvirt_in_l1(l1)
    before = host_state(l1)
    try:
        wrapped = in_l1(l1, python, "-m", "vmharness.host.libvirt.daemon", "sh", "-c",
                        f'"$1" {" ".join(PREPARE)} >&2 && "$2" -c "$3"', "sh", vmh, python, ENSURE, timeout=600)
        print(wrapped.stdout, wrapped.stderr, sep="\n")
        assert wrapped.ok, wrapped.stdout + wrapped.stderr
        owned, said = wrapped.stdout.strip().splitlines()
        assert owned.isdigit(), "the wrapper names the libvirtd it started"
        assert said.startswith("restarted the libvirtd vmharness started (now pid "), said
        new = said.split("now pid ")[1].split(")")[0]
        assert new != owned and f"libvirtd (pid {new}) sees the 1G hugetlbfs at {MOUNT}" in said
        assert in_l1(l1, "pidof", "libvirtd").returncode == 1, "the wrapper stopped the daemon it restarted"
    finally:
        restored = commands.vmharness(l1, "host-restore")
    assert restored.ok and "restored: the host is as vmharness found it" in restored.stdout, restored.stdout
    assert host_state(l1) == before
