"""What a host switch costs in the rig: L1 (tests/rig, booted so that it may kexec: Rig.start's
`host_boots`) goes into a new kernel with kexec, the way the harness's host boots switch a host
(vmharness/experiment/hostboots/kexec.py: `kexec -l` the kernel /boot holds for the running release,
with its initrd and a command line, then a sync and `kexec -e`), timed from the load to L1's agent
answering from the new boot; beside it, L1's cold start (QEMU started, through its firmware and the
kernel, to the agent), which is what a reboot without kexec also goes through. Each switch alternates
the command line between the one L1 started with and that line with `spectre_v2=off`, as a run with
those two host boots would.

    .venv/bin/python -m benchmarks.host_switch [--switches 4]     # from the repository root

Prints each switch's seconds (the load, then the boot), then their medians beside the cold start's.
The rig's cold start is no server's: QEMU enters an uncompressed kernel directly (PVH), with no
firmware to speak of, while a kexec'd kernel decompresses itself and kexec's purgatory checks the
loaded segments first, all under TCG. On a server the firmware's own start, which kexec skips,
takes minutes. A run's switch adds to this what the run gives back before it and prepares after it
(guests down and up: docs/run.md); docs/testing.md keeps what was measured."""

from __future__ import annotations

import argparse
import statistics
import time

from tests.rig import Rig

SWITCH_TIMEOUT = 600.0


def switch(l1: Rig, cmdline: str) -> tuple[float, float]:
    """kexec into the running release with `cmdline`: the seconds `kexec -l` took, and those from
    `kexec -e` until L1 answered from the new boot."""
    boot = f"/boot/vmlinuz-{l1.release}"
    initrd = f"/boot/initrd.img-{l1.release}"
    before = l1.boot_id()
    began = time.monotonic()
    l1.run(["kexec", "-l", boot, f"--initrd={initrd}", f"--append={cmdline}"], timeout=300, check=True)
    loaded = time.monotonic()
    # in a session of its own: the agent's command never ends, L1 does
    l1.run(["sh", "-c", "sync; setsid kexec -e </dev/null >/dev/null 2>&1 &"], timeout=60, check=True)
    l1.await_boot(before, SWITCH_TIMEOUT)
    back = time.monotonic()
    now = l1.read_file("/proc/cmdline").decode().strip()
    if now != cmdline:
        raise SystemExit(f"L1 came back with {now!r}, not {cmdline!r}")
    return loaded - began, back - loaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--switches", type=int, default=4)
    switches = ap.parse_args().switches
    with Rig.start(timeout=300, host_boots=True) as l1:
        cold = l1.boot_seconds
        print(f"L1's cold start: {cold:.1f} s", flush=True)
        first = l1.read_file("/proc/cmdline").decode().strip()
        took: list[tuple[float, float]] = []
        for n in range(switches):
            line = f"{first} spectre_v2=off" if n % 2 == 0 else first
            took.append(switch(l1, line))
            load, boot = took[-1]
            print(f"switch {n + 1} ({'spectre_v2=off' if n % 2 == 0 else 'as L1 started'}): {load + boot:.1f} s "
                  f"(kexec -l {load:.1f} s, then to the agent {boot:.1f} s)", flush=True)
    load, boot = (statistics.median(t[i] for t in took) for i in (0, 1))
    whole = statistics.median(sum(t) for t in took)
    print(f"median switch {whole:.1f} s (kexec -l {load:.1f} s, kexec -e to the agent {boot:.1f} s); L1's cold "
          f"start {cold:.1f} s, the switch {whole / cold:.2f} times as long")


if __name__ == "__main__":
    main()
