"""The whole path with a NIC passed through, for real and without hardware: inside the rig's L1
(emulated VT-d, two NUMA nodes, e1000e functions), `vmharness host-prepare` moves nic1's group to
vfio-pci and reserves hugepages on its node; `vmharness run --bdf ... --hugepages` boots L2 through
libvirt from the guest image with nic1 passed through and its memory on those pages; wrk in L1
loads nginx in L2 over the wire between nic0 and nic1; `host-restore` gives L1 back.

L2 runs under TCG inside TCG, so it boots the rig's kernel (an uncompressed vmlinux, through PVH)
with a small initramfs of its drivers (tests/rig/l2root.py) and the image's minimal init: a
systemd boot of the image takes far too long there (over six minutes to the agent)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest

from tests.rig import Rig, l2root
from tests.rig.topology import NIC0_ADDR
from vmharness import proc
from vmharness.guest import ssh

pytestmark = [pytest.mark.integration, pytest.mark.vm, pytest.mark.slow]

L2_MIB = 384
L2_ADDR = "198.18.0.2/24"  # on nic0's /24: nic0 (wrk's side) and nic1 (L2's) share a QEMU hub


def in_l1(rig: Rig, *argv: str, timeout: float = 600, env: dict[str, str] | None = None) -> proc.Result:
    res = rig.run(list(argv), timeout=timeout, env=env)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def config(rig: Rig) -> str:
    return (f'[guest]\nmemory = {L2_MIB}\ninit = "minimal"\naddress = "{L2_ADDR}"\nboot_timeout = 900\n'
            f'[[instance]]\nname = "l2"\ncmdline = "cryptomgr.notests rodata=off"\n'
            f'kernel = "{rig.kernel.boot_image}"\ninitrd = "{l2root.build(rig.kernel)}"\n'
            '[[client]]\nhost = "local"\nthreads = 1\n'
            '[sweep]\nconnections = "4"\niterations = 1\nduration = 3\nwarmup = 0\nwait = 0\n'
            '[samplers]\ninterval = 5.0\n'  # each snapshot costs L2 seconds of its only vCPU
            '[tuning]\nprofile = "none"\n')


def read_json_lines(rig: Rig, path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in rig.read_file(path).decode().splitlines()]


def test_run_with_the_nic_passed_through_in_l1(l1: Rig) -> None:
    # L1 sees L0's root read-only: the image and the harness's ssh key are made here, in L0.
    built = proc.run([sys.executable, "-m", "vmharness.cli", "image", "build"], timeout=1800, check=False)
    assert built.ok, built.stderr
    ssh.harness_key()
    vmh = str(l1.repo / ".venv/bin/vmharness")
    # L1's libvirt, in the chroot of L0's root the rig runs commands in: there is no udev to make
    # /dev/net/tun for the tap; libvirt's private /dev for QEMU (its mount namespace) does not work
    # in a chroot (QEMU finds no /dev/urandom); and its dynamic ownership would chown the image,
    # which copies all of it into the tmpfs half of L1's /var overlay. So: tun loaded, QEMU in L1's
    # own /dev, as root, files left as they are.
    assert in_l1(l1, "modprobe", "tun").ok
    qemu_conf = 'namespaces = []\nuser = "root"\ngroup = "root"\ndynamic_ownership = 0\n'
    assert in_l1(l1, "sh", "-c", 'printf "%s" "$1" >> /etc/libvirt/qemu.conf', "sh", qemu_conf).ok
    l1.put_file("/tmp/nested.toml", config(l1).encode())
    began = time.monotonic()
    prepared = in_l1(l1, vmh, "host-prepare", "--bdf", l1.nic1.bdf, "--hugepages", f"{L2_MIB}M")
    assert prepared.ok, prepared.stdout + prepared.stderr
    try:
        res = in_l1(l1, str(l1.repo / ".venv/bin/python"), "-m", "vmharness.host.libvirtd", vmh, "run",
                    "/tmp/nested.toml", "--bdf", l1.nic1.bdf, "--hugepages", "--out", "/tmp/nested-run",
                    timeout=2400, env={"MPLCONFIGDIR": "/tmp/mpl"})
        print(res.stderr[-4000:], res.stdout, f"prepare and run took {time.monotonic() - began:.0f} s", sep="\n")
        assert res.returncode == 0, res.stderr[-4000:] + res.stdout
        assert "nothing to change: the host is already prepared" in res.stderr
        records = read_json_lines(l1, "/tmp/nested-run/records.jsonl")
        manifest = json.loads(l1.read_file("/tmp/nested-run/manifest.json"))
    finally:
        restored = in_l1(l1, vmh, "host-restore")
    assert restored.ok and "restored: the host is as vmharness found it" in restored.stdout, restored.stdout
    session = next(r for r in records if r["kind"] == "session")
    point = next(r for r in records if r["kind"] == "measurement")
    assert session["ok"] and session["kernel"] == l1.release and session["address"] == L2_ADDR.split("/")[0]
    facts = manifest["instances"]["l2"]
    assert facts["nics"][session["iface"]]["driver"] == "e1000e"  # the passed-through function
    assert point["ok"] and point["client"]["requests"] > 0 and point["client"]["errors"]["total"] == 0
    wire = point["samples"]["local"]["net"][l1.nic0.ifname]  # wrk's side of the wire, in L1
    assert wire["tx_packets_per_s"] > 0 and wire["rx_packets_per_s"] > 0
    assert manifest["guest"]["kvm"] is False and NIC0_ADDR.startswith("198.18.0.")
    assert in_l1(l1, "test", "-e", "/run/vmharness/journal.jsonl").returncode == 1
    assert in_l1(l1, "sh", "-c", f"readlink /sys/bus/pci/devices/{l1.nic1.bdf}/driver").stdout.strip().endswith(
        "e1000e")
