"""The one place the harness reboots a host: kexec-tools' `kexec -l KERNEL [--initrd=...] --append=...`
loads the next kernel, `kexec -e` starts it. Loading is journaled first (journal op `kexec`, given back
by `kexec -u`, which unloads it): a run killed between the load and the switch leaves a loaded kernel
that host-restore takes away, so nothing else (a later `systemctl kexec`, a reboot that a kexec-tools
hook turns into a kexec) boots it by surprise.

`Kexec` is the interface the engine (engine.py) calls; `Real` runs the program through the project's
process helper (system/proc.py: argv lists, a timeout on every wait). The unit tests give the engine a
fake: nothing in the test tiers may reboot the machine it runs on."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.journal.kinds import OpKind
from vmharness.system import proc
from vmharness.system.root import HostRoot

if TYPE_CHECKING:  # the undo path (host-restore) loads this module, and target.py brings the planner
    from vmharness.experiment.hostboots.target import Target

TIMEOUT = 120.0  # seconds for `kexec -l` (it reads the kernel and initrd) and `kexec -u`
PROGRAM = "kexec"


class Kexec(Protocol):
    def load(self, argv: list[str]) -> None:
        """Load the next kernel (`kexec -l ...`'s argv)."""

    def unload(self) -> None:
        """Unload a loaded kernel (`kexec -u`)."""

    def execute(self) -> None:
        """Start the loaded kernel (`kexec -e`): returns only when it could not."""


class Real:
    """kexec for real, on the live host alone."""

    def __init__(self, root: HostRoot) -> None:
        if not root.live:
            raise HarnessError("host boots are made on the live host alone", "drop --host-root")

    def load(self, argv: list[str]) -> None:
        proc.run(argv, timeout=TIMEOUT)

    def unload(self) -> None:
        proc.run([PROGRAM, "-u"], timeout=TIMEOUT)

    def execute(self) -> None:
        os.sync()  # kexec -e starts the kernel at once: no shutdown writes back what is cached
        res = proc.run([PROGRAM, "-e"], timeout=TIMEOUT, check=False)
        raise HarnessError(f"kexec -e returned ({res.how}): the host did not switch", "host-restore unloads the "
                           "loaded kernel; the run's state says which host boot it was going to")


def load(root: HostRoot, kexec: Kexec, target: Target, program: str, owner: str) -> None:
    """Journal the load, then load `target`."""
    journal.record(root, {"op": OpKind.KEXEC, "boot": target.boot, "kernel": target.kernel.path}, owner)
    kexec.load(target.kexec_argv(program))


def _describe(rec: journal.Record) -> str:
    return f"a kernel loaded for the host boot {rec['boot'] or 'the run started in'} ({rec['kernel']}) by kexec -l"


def _undo(root: HostRoot, rec: journal.Record) -> list[str]:
    if not root.live:
        return []
    try:
        Real(root).unload()
    except HarnessError as exc:
        return [f"kexec -u: {exc.message}"]
    return []


journal.register(OpKind.KEXEC, journal.Op(_describe, _undo, ("boot", "kernel"),
                                          types={"boot": journal.is_str, "kernel": journal.is_str}))
