"""The L1 that the rig modules of one pytest session share."""

from __future__ import annotations

import warnings
from collections.abc import Callable

from tests.rig.rig import Rig


class SessionRig:
    """The L1 the session's rig modules share, booted when first asked for, and booted afresh for a module
    where the one before it wedged (tests/rig/failures.Wedged: stopped, its state unknown): one L1 lost to
    TCG then fails the tests that were on it, not every rig module after them (a CI run on 2026-12-02 lost
    every rig test after one hung 9p read in L1: Rig.unload_kvm)."""

    def __init__(self, start: Callable[[], Rig]) -> None:
        self._start = start
        self.rig: Rig | None = None
        self.boots = 0

    def usable(self) -> Rig:
        if self.rig is not None and not self.rig.usable:
            warnings.warn("the session's L1 wedged in an earlier module or test; a fresh one is booted", stacklevel=2)
            self.rig.stop()
            self.rig = None
        if self.rig is None:
            self.rig = self._start()
            self.boots += 1
        return self.rig

    def stop(self) -> None:
        if self.rig is not None:
            self.rig.stop()
