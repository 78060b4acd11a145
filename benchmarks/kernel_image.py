"""What an image of a researcher's kernel costs with and without the recipe's base tree
(vmharness/guest/basetree.py), side by side on one machine in one run.

    .venv/bin/python -m benchmarks.kernel_image [--rounds 1]

In a temporary image folder of its own, each round builds the same bzImage and modules (Debian's 6.1
kernel the test rig uses, unpacked: tests/rig/kernel.py) twice: first with no base kept there
(mmdebstrap, then the kernel installed; the build keeps the base), then, its image removed, again
(the base unpacked, then the kernel installed). The rows are `image build`'s own times (image.json
`build_seconds`) and the ratio; the folder is removed at the end. Needs root and the host's apt mirror.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.rig import kernel

IMAGES_UNDER = Path("/var/lib/vmharness")  # beside the harness's own image folder


def build(images: Path, vmlinuz: Path, modules: Path) -> dict[str, object]:
    res = subprocess.run([sys.executable, "-m", "vmharness.cli", "image", "build", "--kernel", str(vmlinuz),
                          "--modules", str(modules), "--image-dir", str(images), "--json"],
                         capture_output=True, text=True, timeout=3600, check=False)
    if res.returncode != 0:
        sys.exit(f"image build failed: {res.stderr.strip()[-500:]}")
    meta: dict[str, object] = json.loads(res.stdout)
    return meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    k = kernel.obtain()
    IMAGES_UNDER.mkdir(parents=True, exist_ok=True)
    times: dict[str, list[float]] = {"built": [], "kept": []}
    print(f"image build --kernel {k.release} --modules (seconds)")
    print(f"{'round':>5}  {'mmdebstrap':>10}  {'base kept':>9}  ratio")
    for n in range(args.rounds):
        images = Path(tempfile.mkdtemp(prefix="bench-images-", dir=IMAGES_UNDER)) / "images"
        try:
            first = build(images, k.vmlinuz, k.modules)
            shutil.rmtree(str(first["folder"]))
            second = build(images, k.vmlinuz, k.modules)
            assert (first["base_tree"], second["base_tree"]) == ("built", "kept"), (first, second)
            a, b = float(str(first["build_seconds"])), float(str(second["build_seconds"]))
            times["built"].append(a)
            times["kept"].append(b)
            print(f"{n + 1:>5}  {a:>10.1f}  {b:>9.1f}  {b / a:.2f}")
        finally:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(images.parent)], timeout=300, check=False)
    a, b = statistics.median(times["built"]), statistics.median(times["kept"])
    print(f"median  {a:>10.1f}  {b:>9.1f}  {b / a:.2f}")


if __name__ == "__main__":
    main()
