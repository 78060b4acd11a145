"""L1's console read while commands run in L1: a task its kernel has reported blocked twice over
(`blocked for more than 240 seconds` or longer) ends the wait for the command at once, L1 wedged, where the
command would otherwise be waited for to its own timeout and its clean-up to another.

A clean clone of f0d4fa9 (2026-12-04) lost 20 minutes so: `host-prepare` in L1 unbound nic1 from e1000e,
and the unbind waited in `rcu_barrier` with every vCPU of L1 halted, reported as a hung task at 363, 484,
605 s and on; the test waited out `host-prepare`'s 600 s, then `host-restore`'s in its clean-up, while
the host's stream waited for the rig's lock. The kernel reports a task first at 120 s of D state and then
every 120 s (hung_task_timeout_secs); the first report alone is not taken, as a task may sleep that long in
an L1 whose vCPUs a loaded L0 starves and then go on; the second one, at four minutes, is."""

from __future__ import annotations

import re
from pathlib import Path

from tests.rig.pacing import Pacing

BLOCKED = re.compile(r"INFO: task (\S+) blocked for more than (\d+) seconds")
WEDGED_TASK_S = 240  # a task's second report
LOOK_S = 2.0  # seconds between looks at the console
MAX_READ = 1 << 20  # bytes of new console output read at one look


class Stalled(Exception):
    """L1's kernel said `line`: a task of it blocked WEDGED_TASK_S seconds or more."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


class ConsoleWatch:
    """Called now and then while a command runs in L1 (qga's exec loop); raises Stalled once the console
    has said, since the watch began or its last look, that a task blocked WEDGED_TASK_S seconds or more.
    A partial last line is kept for the next look; a console that cannot be read is looked at again later."""

    def __init__(self, console: Path, every: float = LOOK_S) -> None:
        self._console = console
        self._pacing = Pacing(every)
        try:
            self._offset = console.stat().st_size
        except OSError:
            self._offset = 0

    def __call__(self) -> None:
        if not self._pacing.due():
            return
        try:
            with self._console.open("rb") as f:
                f.seek(self._offset)
                new = f.read(MAX_READ)
        except OSError:
            return
        whole = len(new) if len(new) == MAX_READ else new.rfind(b"\n") + 1
        self._offset += whole
        for line in new[:whole].decode(errors="replace").splitlines():
            said = BLOCKED.search(line)
            if said and int(said.group(2)) >= WEDGED_TASK_S:
                raise Stalled(line.strip())
