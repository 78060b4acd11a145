"""Connection counts written as the seed does them: `16:256:16,256:1024:128` is `seq 16 16 256`,
then `seq 256 128 1024` (start:stop:step, stop included), or a plain list `16,64,256`; mixed freely.
The result is sorted with duplicates removed."""

from __future__ import annotations

from vmharness.errors import HarnessError

_HINT = "write start:stop:step ranges and/or single counts, comma-separated, e.g. 16:256:16,256:1024:128"


def parse(text: str) -> tuple[int, ...]:
    counts: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise HarnessError(f"connection list {text!r} has an empty entry", _HINT)
        fields = part.split(":")
        try:
            numbers = [int(f) for f in fields]
        except ValueError:
            raise HarnessError(f"connection list entry {part!r} is not a number or start:stop:step", _HINT) from None
        if len(numbers) == 1:
            start, stop, step = numbers[0], numbers[0], 1
        elif len(numbers) == 3:
            start, stop, step = numbers
        else:
            raise HarnessError(f"connection list entry {part!r} has {len(numbers)} fields", _HINT)
        if start < 1 or step < 1 or stop < start:
            raise HarnessError(f"connection list entry {part!r} is empty or not positive",
                               "counts and steps are at least 1, and stop is not below start")
        counts.update(range(start, stop + 1, step))
    return tuple(sorted(counts))


def check_threads(counts: tuple[int, ...], threads: int) -> None:
    """wrk refuses fewer connections than threads; say so before anything starts."""
    low = [c for c in counts if c < threads]
    if low:
        raise HarnessError(f"{low[0]} connections is fewer than the {threads} client threads (wrk needs at least "
                           "one connection per thread)", f"start the sweep at {threads} or set fewer threads")
