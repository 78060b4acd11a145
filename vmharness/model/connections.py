"""Connection counts written as the seed does them: `16:256:16,256:1024:128` is `seq 16 16 256`,
then `seq 256 128 1024` (start:stop:step, stop included), or a plain list `16,64,256`; mixed freely.
The result is sorted with duplicates removed.

The list is counted before it is expanded: a sweep of more than `MAX_POINTS` counts would run for
days, and a range such as `1:1000000000:1` must be refused, not built in memory."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

MAX_POINTS = 1000
MAX_CONNECTIONS = 1_000_000
MAX_THREADS = 4096
_HINT = "write start:stop:step ranges and/or single counts, comma-separated, e.g. 16:256:16,256:1024:128"


def parse(text: str, where: str = "sweep.connections") -> tuple[int, ...]:
    """The counts in `text`; `where` names the setting or flag in errors."""
    ranges: list[range] = []
    points = 0
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise HarnessError(f"{where}: {text[:80]!r} has an empty entry", _HINT)
        fields = part.split(":")
        if not all(re.fullmatch(r"[0-9]{1,9}", f) for f in fields):
            raise HarnessError(f"{where}: entry {part[:40]!r} is not a number or start:stop:step", _HINT)
        numbers = [int(f) for f in fields]
        if len(numbers) == 1:
            start, stop, step = numbers[0], numbers[0], 1
        elif len(numbers) == 3:
            start, stop, step = numbers
        else:
            raise HarnessError(f"{where}: entry {part[:40]!r} has {len(numbers)} fields", _HINT)
        if start < 1 or step < 1 or stop < start:
            raise HarnessError(f"{where}: entry {part!r} is empty or not positive",
                               "counts and steps are at least 1, and stop is not below start")
        if stop > MAX_CONNECTIONS:
            raise HarnessError(f"{where}: entry {part!r} goes above {MAX_CONNECTIONS:,} connections",
                               "no client machine holds more open connections")
        points += (stop - start) // step + 1
        if points > MAX_POINTS:
            raise HarnessError(f"{where}: {text[:80]!r} gives more than {MAX_POINTS} connection counts",
                               "use a larger step: each count is a measured point (the seed's list has 21)")
        ranges.append(range(start, stop + 1, step))
    return tuple(sorted({c for r in ranges for c in r}))


def check_threads(counts: tuple[int, ...], threads: int) -> None:
    """wrk refuses fewer connections than threads; say so before anything starts."""
    low = [c for c in counts if c < threads]
    if low:
        raise HarnessError(f"{low[0]} connections is fewer than the {threads} client threads (wrk needs at least "
                           "one connection per thread)", f"start the sweep at {threads} or set fewer threads")
