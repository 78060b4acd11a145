"""The rig's second host kernel for real: L1 booted with Debian's trixie-backports kernel (7.3 in
December 2026; tests/rig/kernel_index.py fetches it through that suite's index) instead of bookworm's
6.1. It is the kernel with the attack-vector controls (Linux 6.17 on): booted as it comes, its log names
every attack vector it mitigates, guest_host among them, and KVM works under it in L1: kvm_amd loads
and `host-check` boots a guest under KVM there, with 7.3 as the guest's kernel too.

The switch itself is the host-boot study's (test_host_boots_in_l1.py): it kexecs L1 into this kernel
with `mitigations=auto,no_guest_host` and reads the same line from its run's mitigation log without
guest_host. The two together are the known answer and its control: the line changes with the switch,
not by itself. This test booted L1 a second time with the switch itself until that study asserted it
too (one L1 boot under TCG, about a minute of the rig's stream, docs/testing.md); what that second boot
also read, L1's vulnerability files the same both ways (its CPU, not the kernel, decides them), is a
measured fact in docs/run.md, no longer asserted."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import BOOT_TIMEOUT
from tests.integration.test_kvm_rig import IMAGES, _rig_image, sh
from tests.rig import Rig, commands, kernel, kernel_index

pytestmark = [pytest.mark.integration, pytest.mark.vm]


def test_l1_under_trixies_kernel_names_every_attack_vector_and_runs_kvm(own_rigs: None) -> None:
    kern = kernel_index.obtain()
    assert kern.release.split(".")[0].isdigit() and int(kern.release.split(".")[0]) >= 7, kern
    with Rig.start(timeout=BOOT_TIMEOUT, kern=kern) as rig:
        assert sh(rig, "uname -r").strip() == kern.release
        assert not any(w.startswith("mitigations=") for w in rig.read_file("/proc/cmdline").decode().split())
        # what the host-boot study's k73 visit names, less guest_host (test_host_boots_in_l1.py)
        stock = kernel.attack_vectors(sh(rig, "dmesg").splitlines())
        assert {"user_kernel", "guest_guest", "guest_host"} <= stock, stock
        with rig.kvm():
            _rig_image(rig)  # the rig's kernel, 7.3 here, as the probe's guest's
            res = commands.vmharness(rig, "host-check", "--json", timeout=900, env={"VMHARNESS_IMAGE_DIR": IMAGES})
            rows = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
            assert rows["KVM usable"]["status"] == "PASS", rows["KVM usable"]
            assert "booted under KVM with -cpu host" in rows["KVM usable"]["detail"], rows["KVM usable"]
