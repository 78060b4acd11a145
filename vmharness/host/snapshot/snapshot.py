"""host-snapshot: a small tarball of exactly what the inspection commands read, laid out like `/`.

Those commands are host-check, host-groups, host-prepare --dry-run, tune plan and run --print-xml;
tests/integration/test_snapshot_complete.py runs each on this host and on its snapshot, and checks
that the outputs are equal and that every path read on the snapshot is in it (root.recording()).

The parts are taken in a fixed order by kernel.py (procfs, modules, device nodes, memory, tuning),
devices.py (PCI, network interfaces, IOMMU) and claims.py (libvirt domains, the journal), written by
writer.py; the live probes, and what the libvirt daemon can see, go in beside them. MAC addresses,
serial numbers and file contents outside these lists are not taken. Works on any host root, so a
snapshot can be taken of a snapshot. The tarball is never written inside the host root it describes
(a host root is read-only), nor over a file an earlier snapshot did not write (host/snapshot/file.py).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.host.inspect import probes
from vmharness.host.inspect.pci import PCI_DEVICES
from vmharness.host.libvirt import hugetlbfs
from vmharness.host.snapshot import claims, devices, file, kernel
from vmharness.host.snapshot.writer import Writer
from vmharness.system.root import HostRoot


def build(root: HostRoot) -> bytes:
    """The snapshot of `root`, a .tar.gz."""
    if not root.is_dir(PCI_DEVICES):
        raise HarnessError(f"{root.base} has no {PCI_DEVICES}: nothing to snapshot", "is /sys mounted?")
    live = probes.load(root)
    if live is not None and root.live:  # what the libvirt daemon can see, read back by libvirt/hugetlbfs.py
        live = {**live, "libvirt": hugetlbfs.measure(root)}
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        w = Writer(root, tar)
        for part in (kernel.kernel, devices.pci, devices.net, devices.iommu, kernel.memory, kernel.tuning,
                     claims.domains, claims.journal_records):
            part(w)
        if live is not None:
            w.data(probes.PROBES_FILE, json.dumps(live, indent=2, sort_keys=True).encode())
    return buf.getvalue()


def write(root: HostRoot, out: Path, force: bool = False) -> int:
    """Write the snapshot of `root` to `out` (host/snapshot/file.py says where it may go); returns its
    size in bytes."""
    file.check(root, out, force)
    data = build(root)
    file.save(root, out, data, force)
    return len(data)
