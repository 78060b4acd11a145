"""Boot-to-agent time of the default guest image, with each init, beside virtme-ng running a command in
a guest with the same kernel; and the other fixed costs of a guest's life.

    .venv/bin/python benchmarks/boot_to_agent.py [--boots 3] [--vcpus 2] [--memory 1024] [--no-vng]

One row per boot (seconds): plan (placement, KVM probe), overlay + define + start + link addresses,
start -> agent answers, one `uname -r` through the agent, shutdown + undefine + overlay removal.
The inits take turns (systemd, minimal, systemd, ...), so drift on a noisy machine is shared out.
Then `vng --run KERNEL --disable-kvm --force-9p -- true` as often, wall time from start to exit,
with the image's kernel and its modules (taken out of the image with qemu-img and debugfs into a
temporary folder, where vng looks for them beside the kernel). vng comes with `pip install virtme-ng`
(`make bench` installs it); the comparison with vmharness is its wall time against ours from define
to the agent answering, because both start QEMU. Then the time to "build" an unchanged image (the
recipe's cache key computed, the image found), which a run pays at each start.
Needs root, libvirtd and a built image (vmharness image build).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vmharness.guest import agent, domain, image, imagebuild, instance, running, vm
from vmharness.guest.recipe import load_recipe
from vmharness.journal import journal
from vmharness.system import proc
from vmharness.system.root import HostRoot

INITS = ("systemd", "minimal")


def one_boot(root: HostRoot, req: instance.VmRequest) -> dict[str, float]:
    t0 = time.monotonic()
    planned = instance.plan(root, req)
    t1 = time.monotonic()
    with journal.Lock(root):
        guest = vm.up(root, planned.spec, req.uri, planned.base_disk, domain.to_xml(planned.spec),
                      lambda _line: None, "vm:bench", link_net=planned.link_net)
    t2 = time.monotonic()
    conn, dom = running.domain(guest)
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


def vng_kernel(img: image.Image, into: Path) -> Path:
    """The image's kernel at into/boot/vmlinuz-REL and its modules at into/lib/modules/REL, read out of
    the image's filesystem (no mount: debugfs reads the raw copy)."""
    release = str(img.meta["kernel_release"])
    raw = into / "root.raw"
    proc.run(["qemu-img", "convert", "-O", "raw", img.disk, raw], timeout=300)
    (into / "lib" / "modules").mkdir(parents=True)
    proc.run(["debugfs", "-R", f"rdump /usr/lib/modules/{release} {into / 'lib' / 'modules'}", raw], timeout=300)
    raw.unlink()
    (into / "boot").mkdir()
    kernel = into / "boot" / f"vmlinuz-{release}"
    shutil.copyfile(img.kernel, kernel)
    return kernel


def vng_once(vng: str, kernel: Path) -> float:
    t0 = time.monotonic()
    # vng starts its helpers (virtme-run) by name: from its own folder, a venv's bin
    path = f"{Path(vng).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    res = proc.run([vng, "--verbose", "--run", kernel, "--disable-kvm", "--force-9p", "--", "true"],
                   timeout=600, check=False, env={"PATH": path})
    took = time.monotonic() - t0
    # vng's own exit status is 255 here even when the command ran (it falls back to the console for
    # the command's I/O); its init says how the command ended.
    if "script exited with code 0" not in res.stdout + res.stderr:
        raise SystemExit(f"vng did not run the command ({res.how}): {(res.stderr or res.stdout)[-500:]}")
    return took


def median(rows: list[dict[str, float]]) -> str:
    return "  ".join(f"{k} {statistics.median(r[k] for r in rows):6.2f}" for k in rows[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--vcpus", type=int, default=None)
    ap.add_argument("--memory", type=int, default=1024)
    ap.add_argument("--no-vng", action="store_true", help="leave virtme-ng out")
    args = ap.parse_args()
    root = HostRoot.open(None)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in INITS}
    for i in range(args.boots):
        for name in INITS:
            req = instance.VmRequest(name="bench", vcpus=args.vcpus, memory_mib=args.memory,
                                     cmdline=instance.with_init(name, ""))
            row = one_boot(root, req)
            rows[name].append(row)
            print(f"{name:8} boot {i + 1}: " + "  ".join(f"{k} {v:6.2f}" for k, v in row.items()), flush=True)
    for name, got in rows.items():
        print(f"{name:8} median: {median(got)}")
    img = instance.resolve_image(instance.VmRequest())
    t0 = time.monotonic()
    imagebuild.build(load_recipe(), img.folder.parent, lambda _line: None)
    print(f"unchanged image reused in {time.monotonic() - t0:.2f} s")
    vng = shutil.which("vng") or str(Path(sys.executable).parent / "vng")
    if args.no_vng or not Path(vng).exists():
        print("virtme-ng: left out" + ("" if args.no_vng else " (not installed: pip install virtme-ng)"))
        return 0
    with tempfile.TemporaryDirectory(prefix="vmh-vng-") as tmp:
        kernel = vng_kernel(img, Path(tmp))
        took = []
        for i in range(args.boots):
            took.append(vng_once(vng, kernel))
            print(f"vng      run {i + 1}: {took[-1]:6.2f} s (start to exit)", flush=True)
    ours = {name: statistics.median(r["overlay+define+start+link"] + r["to agent"] for r in got)
            for name, got in rows.items()}
    print(f"vng median {statistics.median(took):.2f} s; vmharness define -> agent answers: "
          + ", ".join(f"{name} {v:.2f} s" for name, v in ours.items()))
    return 0


if __name__ == "__main__":
    from vmharness.signals import terminate_as_interrupt

    with terminate_as_interrupt():  # as the CLI does: SIGTERM unwinds, the guest is taken down
        sys.exit(main())
