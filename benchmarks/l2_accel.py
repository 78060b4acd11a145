"""What KVM in the rig's L1 saves an L2: one L1 (tests/rig) prepared by `vmharness host-prepare --bdf
nic1 --hugepages 128M`, then L2 booted with nic1 passed through (tests/rig/l2.py, its busybox init
lists the PCI devices and powers off) under TCG inside TCG and under KVM in L1 (kvm_amd loaded for
it, unloaded after), alternating, so that the machine's load falls on both alike. L1 is given back
by `vmharness host-restore` at the end.

    .venv/bin/python -m benchmarks.l2_accel [--rounds 2]     # from the repository root

Prints each boot's time (QEMU's start in L1 to its exit) and L2's uptime at its marker, then each
accelerator's median and their ratio. On 2026-11-29, quiet machine: TCG 275 and 330 s, KVM 54 and 50 s
(the listing test, tests/integration/test_l2.py, now boots its L2 under KVM)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext

from tests.rig import Rig
from tests.rig.l2 import boot_l2

MIB = 128


def boot(l1: Rig, mem_path: str, accel: str) -> tuple[float, float | None]:
    with l1.kvm() if accel == "kvm" else nullcontext():
        began = time.monotonic()
        result = boot_l2(l1, bdfs=[l1.nic1.bdf], mem_path=mem_path, mem_mib=MIB, host_node=1, accel=accel)
        return time.monotonic() - began, result.uptime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    rounds = ap.parse_args().rounds
    took: dict[str, list[float]] = {"tcg": [], "kvm": []}
    with Rig.start(timeout=300) as l1:
        vmh = str(l1.repo / ".venv/bin/vmharness")
        prepare = [vmh, "host-prepare", "--bdf", l1.nic1.bdf, "--hugepages", f"{MIB}M"]
        plan = json.loads(l1.run([*prepare, "--dry-run", "--json"], timeout=600, check=True).stdout)
        l1.run(prepare, timeout=600, check=True)
        try:
            for _ in range(rounds):
                for accel in took:
                    seconds, uptime = boot(l1, plan["mount"] or plan["mount_existing"], accel)
                    took[accel].append(seconds)
                    print(f"{accel}: {seconds:.1f} s, L2 at its marker after {uptime} s of uptime", flush=True)
        finally:
            l1.run([vmh, "host-restore"], timeout=600, check=True)
    tcg, kvm = (statistics.median(took[a]) for a in ("tcg", "kvm"))
    print(f"median: TCG inside TCG {tcg:.1f} s, KVM in L1 {kvm:.1f} s: {tcg / kvm:.1f} times faster")


if __name__ == "__main__":
    main()
