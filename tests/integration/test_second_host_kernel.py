"""The rig's second host kernel for real: L1 booted with Debian's trixie-backports kernel (7.3 in
December 2026; tests/rig/kernel_index.py fetches it through that suite's index) instead of bookworm's
6.1. It is the kernel with the attack-vector controls (Linux 6.17 on): with
`mitigations=auto,no_guest_host` on L1's command line, its log names the attack vectors it mitigates
without guest_host; booted again without the switch, the same kernel names guest_host too (the
control: the line changes with the switch, not by itself). Under it KVM works in L1: kvm_amd loads and
`host-check` boots a guest under KVM there, with 7.3 as the guest's kernel too.

What L1's CPU reports does not change with the switch: its vulnerability files read the same both
ways (under QEMU 10.0's `-cpu max`, spectre_v2 "Mitigation: Retpolines", nothing guest-to-host
specific in effect), as 6.1's do. The host-boot study (test_host_boots_in_l1.py) kexecs into the same kernel
with the same switch and reads the same line from its run's mitigation log."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import BOOT_TIMEOUT
from tests.integration.test_kvm_rig import IMAGES, _rig_image, sh
from tests.rig import Rig, commands, kernel, kernel_index

pytestmark = [pytest.mark.integration, pytest.mark.vm]


def attack_vectors(rig: Rig) -> set[str]:
    return kernel.attack_vectors(sh(rig, "dmesg").splitlines())


def vulnerabilities(rig: Rig) -> str:
    return sh(rig, "cd /sys/devices/system/cpu/vulnerabilities && grep -H . *")


def test_l1_under_trixies_kernel_takes_the_attack_vector_switch_and_runs_kvm(own_rigs: None) -> None:
    kern = kernel_index.obtain()
    assert kern.release.split(".")[0].isdigit() and int(kern.release.split(".")[0]) >= 7, kern
    with Rig.start(timeout=BOOT_TIMEOUT, kern=kern, append="mitigations=auto,no_guest_host") as rig:
        assert sh(rig, "uname -r").strip() == kern.release
        assert "mitigations=auto,no_guest_host" in rig.read_file("/proc/cmdline").decode().split()
        switched = attack_vectors(rig)
        assert "guest_host" not in switched and {"user_kernel", "guest_guest"} <= switched, switched
        switched_vulns = vulnerabilities(rig)
        with rig.kvm():
            _rig_image(rig)  # the rig's kernel, 7.3 here, as the probe's guest's
            res = commands.vmharness(rig, "host-check", "--json", timeout=900, env={"VMHARNESS_IMAGE_DIR": IMAGES})
            rows = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
            assert rows["KVM usable"]["status"] == "PASS", rows["KVM usable"]
            assert "booted under KVM with -cpu host" in rows["KVM usable"]["detail"], rows["KVM usable"]
    with Rig.start(timeout=BOOT_TIMEOUT, kern=kern) as rig:
        stock = attack_vectors(rig)
        assert stock == switched | {"guest_host"}, (stock, switched)
        assert vulnerabilities(rig) == switched_vulns
