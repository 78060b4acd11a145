"""Boot-to-agent time of the default guest image, and the other fixed costs of a guest's life.

    .venv/bin/python benchmarks/boot_to_agent.py [--boots 3] [--vcpus 2] [--memory 1024]

Prints one row per boot (seconds): plan (placement, KVM probe), overlay + define + start + link
addresses, start -> agent answers, one `uname -r` through the agent, shutdown + undefine + overlay
removal; then the median of each.
Needs root, libvirtd and a built image (vmharness image build).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from vmharness.guest import agent, domain, instance, vm
from vmharness.host import journal
from vmharness.host.root import HostRoot


def one_boot(root: HostRoot, req: instance.VmRequest) -> dict[str, float]:
    t0 = time.monotonic()
    planned = instance.plan(root, req)
    t1 = time.monotonic()
    with journal.Lock(root):
        guest = vm.up(root, planned.spec, req.uri, planned.base_disk, domain.to_xml(planned.spec),
                      lambda _line: None, "vm:bench", link_net=planned.link_net)
    t2 = time.monotonic()
    conn, dom = vm.domain(guest)
    try:
        agent.run(dom, ["uname", "-r"])
    finally:
        conn.close()
    t3 = time.monotonic()
    with journal.Lock(root):
        vm.down(root, guest, lambda _line: None)
    t4 = time.monotonic()
    # `up` = overlay + define + start + wait for the agent + link addresses; boot_seconds is the wait.
    return {"plan": t1 - t0, "overlay+define+start+link": t2 - t1 - guest.boot_seconds,
            "to agent": guest.boot_seconds, "exec": t3 - t2, "down": t4 - t3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--vcpus", type=int, default=None)
    ap.add_argument("--memory", type=int, default=1024)
    args = ap.parse_args()
    root = HostRoot.open(None)
    req = instance.VmRequest(name="bench", vcpus=args.vcpus, memory_mib=args.memory)
    rows = []
    for i in range(args.boots):
        row = one_boot(root, req)
        rows.append(row)
        print(f"boot {i + 1}: " + "  ".join(f"{k} {v:6.2f}" for k, v in row.items()), flush=True)
    print("median:  " + "  ".join(f"{k} {statistics.median(r[k] for r in rows):6.2f}" for k in rows[0]))
    return 0


if __name__ == "__main__":
    from vmharness.interrupts import terminate_as_interrupt

    with terminate_as_interrupt():  # as the CLI does: SIGTERM unwinds, the guest is taken down
        sys.exit(main())
