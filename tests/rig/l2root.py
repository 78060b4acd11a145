"""The initramfs for an L2 that `vmharness run` boots inside L1 from the guest image, with the rig's
kernel as the researcher's kernel (its uncompressed vmlinux boots through PVH; the image's initramfs
and systemd are far too slow under TCG inside TCG). It carries the rig kernel's drivers for the
virtio disk, ext4 (and the crc32c it asks the crypto API for), the virtio link and agent port, and
the passed-through e1000e; its init mounts the image's root and starts the image's minimal init
(vmharness/data/images/overlay/usr/local/sbin/vmh-init)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.rig import cpio, initramfs
from tests.rig.kernel import Kernel
from vmharness.errors import HarnessError

INIT_TEMPLATE = Path(__file__).with_name("l2-root-init.sh")
MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "virtio_net", "virtio_console", "e1000e",
           "vmxnet3")


def build(kernel: Kernel) -> Path:
    """The (cached) initramfs for `kernel`."""
    paths = initramfs.load_order(kernel.modules, MODULES)
    plain = [initramfs.plain_name(p) for p in paths]
    init = INIT_TEMPLATE.read_text().replace("@MODULES@", " ".join(plain)).replace("@RELEASE@", kernel.release)
    if left := re.findall(r"@[A-Z0-9_]+@", init):
        raise HarnessError(f"{INIT_TEMPLATE.name} has placeholders nobody fills: {left}")
    entries = [cpio.directory(d) for d in ("bin", "dev", "lib", "proc", "root", "sys")]
    entries += [cpio.chardev("dev/console", 5, 1), cpio.file("bin/busybox", initramfs.busybox(), 0o755),
                cpio.file("init", init.encode(), 0o755)]
    entries += initramfs.module_entries(kernel, paths)
    return initramfs.cached(cpio.archive(entries), "l2-root-initramfs")
