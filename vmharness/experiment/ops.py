"""The whole journal table. Each subsystem registers its journal ops when it is imported (the host's
in host/prepare/bind.py, pages.py, kmod.py, knobs.py, reload.py and irqs.py, harness-made files' in
journal/files.py, tuning's in tune/apply.py, guests' in guest/vm.py, servers' in bench/server.py, a
host boot's loaded kernel in experiment/hostboots/kexec.py, the unit that resumes a run after one in
bootunit.py); the
commands that read the journal as a whole — host-restore, and run and bench when they reclaim what a dead run left —
import them all from here, above every layer, so that no record is ever mistaken for an unknown one."""

from __future__ import annotations

from collections.abc import Callable

from vmharness.bench import server
from vmharness.errors import HarnessError
from vmharness.experiment.hostboots import bootunit, kexec
from vmharness.guest import vm
from vmharness.host.prepare import bind, irqs, kmod, knobs, pages, reload
from vmharness.journal import files, restore
from vmharness.system.root import HostRoot
from vmharness.tune import apply

# imported for their journal.register calls
REGISTRARS = (bind, pages, kmod, knobs, reload, files, irqs, apply, vm, server, kexec, bootunit)


def reclaim(root: HostRoot, say: Callable[[str], None]) -> None:
    """Give back what runs and benches that died left (the caller holds the lock, so they are dead);
    an error if any of it cannot be given back, since the new run would trip over it."""
    problems = restore.reclaim(root, say)
    if problems:
        raise HarnessError(f"could not give back what an interrupted run left: {problems[0]}",
                           "vmharness host-restore shows and retries it")


def undo_all(root: HostRoot, say: Callable[[str], None]) -> list[str]:
    """host-restore: give back every outstanding record, whoever owns it; returns the problems."""
    return restore.undo(root, say)


def leftovers(root: HostRoot, dry_run: bool) -> list[str]:
    """host-restore: what no journal record names, since a boot emptied /run, yet a run with host boots
    left: the systemd unit that would resume it (removed unless `dry_run`)."""
    if not bootunit.installed(root):
        return []
    return [f"would remove {bootunit.UNIT}"] if dry_run else bootunit.leftover(root)
