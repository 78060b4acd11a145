"""How often a watch of L1 looks while a command runs (console_watch.py, timer_watch.py): the exec loop
calls each watch at every poll of the command, a few times a second, and a look costs a read."""

from __future__ import annotations

import time


class Pacing:
    """`due()` is true at most once every `every` seconds, the first time `every` s after the start."""

    def __init__(self, every: float) -> None:
        self._every = every
        self._next = time.monotonic() + every

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self._every
        return True
