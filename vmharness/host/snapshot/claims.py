"""What others and the harness already hold, in a snapshot: the running libvirt domains' PCI devices
(a NIC another guest holds is refused), and of the journal only the driver bindings and hugepages it
records, with the markers that say which are given back (what a run would take over from host-prepare).
A damaged journal is an error naming it, as it is for every command."""

from __future__ import annotations

import json

from vmharness.errors import HarnessError
from vmharness.host.inspect import vfio_users
from vmharness.host.snapshot.writer import Writer
from vmharness.journal import journal
from vmharness.journal.kinds import OpKind

JOURNAL_OPS = (OpKind.BIND, OpKind.PAGES, OpKind.RELEASED, OpKind.OWNER)  # read by host-prepare --dry-run, run


def domains(w: Writer) -> None:
    """The running libvirt domains' PCI devices (a NIC another guest holds is refused): each status
    file as vfio_users.digest cuts it down."""
    if not w.root.is_dir(vfio_users.LIBVIRT_RUN):
        return
    w.dir(vfio_users.LIBVIRT_RUN)
    for name in w.root.listdir(vfio_users.LIBVIRT_RUN):
        if name.endswith(".xml"):
            try:
                text = w.root.read_optional(f"{vfio_users.LIBVIRT_RUN}/{name}")
            except HarnessError:  # not a regular file, or too large for a status file: left out
                continue
            if text is not None:
                w.data(f"{vfio_users.LIBVIRT_RUN}/{name}", vfio_users.digest(text))


def journal_records(w: Writer) -> None:
    """The journal's driver bindings and hugepages, with the markers that say which are given back:
    what `run` takes over from host-prepare and what host-prepare calls its own."""
    if not w.root.path(journal.JOURNAL).is_file():  # none, or not a regular file: left out, never opened
        return
    kept = [r for r in journal.read(w.root) if r["op"] in JOURNAL_OPS]  # may be none: an empty journal
    w.data(journal.JOURNAL, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept).encode())
