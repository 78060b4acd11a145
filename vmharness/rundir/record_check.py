"""What a record of records.jsonl must be to count in a figure: the one place that says it, for every kind
the harness writes. `store.RunDir.records` applies it to each record before anything reads it, so the
report, the plans and `--resume` all see the same records.

These faults leave a record out of every figure; it is named with its file and line, the report's first
warning counts what was left out and why, and `report --strict` refuses the file instead:
- **a number that cannot be a measurement**: not finite (JSON has no NaN or Infinity, but Python reads
  both) or a float beyond 2**63 anywhere, or a figure outside its range (RULES: requests/s, counts, latencies, CPU
  shares, connections, iterations...). A count must be a whole number; a record's latency percentiles
  must not fall as the percentile rises.
- **a kind this version does not know** (KINDS: a newer harness may write one; its meaning is unknown).
- **a point already measured**: a key after that key's successful record (a point's records are its
  failed attempts, then at most one success: a retry after a failure, by `--resume`, writes the key
  again), a key that is not its own fields' (it would count as another point), a second `load_target`,
  a second `capacity` record of one machine.
- **a record contradicting the run** (rundir/cross_check.py: set beside the manifest and the other records).

A value of the wrong type is no measurement at all and is refused, naming the file and the line
(type_fault: text or true/false where RULES has a figure, an `ok` that is not true or false). A figure
that is missing or of another shape (null, a list) is the reader's to refuse, with an error naming the
record (docs/safety.md, section 6); a figure's range is checked only where it is a number.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from vmharness.model.connections import MAX_CONNECTIONS
from vmharness.model.sections import DAY, LoadSection, SweepSection
from vmharness.rundir.histogram import MOST_COUNT, MOST_US, PERCENTILES
from vmharness.rundir.jsontext import MOST  # beyond any counter or figure the harness writes
from vmharness.stats import MOST_REPEATS

MAX_RATE = 1e9  # requests/s: 400 Gb/s carries about 5e8 of the smallest request and answer
ONE_CORE = 200.0  # % of one CPU: a thread reaches 100, and two readings a fraction of a second apart add jitter
MAX_FREQUENCY = 100_000  # samples/s: perf refuses more than its perf_event_max_sample_rate (100000 at most)
SLACK = 0.05  # percentage points: a machine's CPU shares are rounded to 0.01 each, busy is 100 less three


def _high(section: type, name: str) -> int:
    """A configuration field's upper bound (model/sections.py's `bounded`)."""
    field = next(f for f in dataclasses.fields(section) if f.name == name)
    return int(field.metadata["bounds"][1])


MAX_ITERATIONS = _high(SweepSection, "max_iterations")
MAX_PERCENT = _high(LoadSection, "percents")

Rule = tuple[tuple[str, ...], float, float, bool]  # path ("*": every key or item), low, high, whole numbers only
NUM, WHOLE = False, True

_POINT: list[Rule] = [(("connections",), 1, MAX_CONNECTIONS, WHOLE), (("iteration",), 0, MAX_ITERATIONS - 1, WHOLE)]
_CLIENT: list[Rule] = [
    (("client", "requests_per_s"), 0, MAX_RATE, NUM),
    (("client", "requests"), 0, MOST_COUNT, WHOLE),
    (("client", "errors", "*"), 0, MOST_COUNT, WHOLE),
    (("client", "latency_us", "count"), 0, MOST_COUNT, WHOLE),
    (("client", "latency_us", "percentiles", "*"), 0, MOST_US, NUM),
]
_EVENTS: list[Rule] = [  # a machine's kernel events each second, in a point's samples and an idle record's
    (("samples", "*", "context_switches_per_s"), 0, MOST, NUM),
    (("samples", "*", "page_faults_per_s"), 0, MOST, NUM),
    (("samples", "*", "interrupts_per_s"), 0, MOST, NUM),
    (("samples", "*", "tlb_shootdowns_per_s"), 0, MOST, NUM),
    (("samples", "*", "softirqs_per_s", "*"), 0, MOST, NUM),
]
_SIDES: list[Rule] = [  # what analysis/sides.py, packets.py and cells.py read of a point's other figures
    (("samples", "*", "cpu", "*", "*"), -SLACK, 100 + SLACK, NUM),
    (("samples", "*", "process", "cpu_percent_of_one"), 0, MOST, NUM),
    (("samples", "*", "net", "*", "*"), 0, MOST, NUM),
    *_EVENTS,
    (("host", "vcpu_busy_percent", "*"), 0, ONE_CORE, NUM),
    (("host", "vcpu_wait_percent", "*"), 0, ONE_CORE, NUM),
    (("host", "qemu_other_percent"), 0, MOST, NUM),  # QEMU's threads but its vCPUs: any number of them
    (("host", "window_s"), 0, DAY, NUM),
    (("host", "kvm_exits", "*"), 0, MOST_COUNT, WHOLE),
    (("host", "vfio_interrupts_per_s", "*"), 0, MOST, NUM),
    (("host", "vfio_vectors", "*"), 0, MOST, WHOLE),
    (("client", "clients_detail", "*", "threads_cpu", "percent_of_one", "*"), 0, ONE_CORE, NUM),
]
RULES: dict[str, list[Rule]] = {
    "measurement": _POINT + _CLIENT + _SIDES + [(("repeat",), 1, MOST_REPEATS - 1, WHOLE)],
    "load": _POINT + _CLIENT + _SIDES + [(("percent",), 1, MAX_PERCENT, WHOLE), (("rate",), 0, MAX_RATE, NUM)],
    "load_target": [(("connections",), 1, MAX_CONNECTIONS, WHOLE), (("requests_per_s",), 0, MAX_RATE, NUM),
                    (("rates", "*"), 0, MAX_RATE, NUM), (("iterations",), 0, MAX_ITERATIONS, WHOLE)],
    "capacity": [(("connections",), 1, MAX_CONNECTIONS, WHOLE), (("seconds",), 0, DAY, NUM),
                 (("closed_per_s",), 0, MAX_RATE, NUM), (("open_per_s",), 0, MAX_RATE, NUM)],
    "idle": [(("iteration",), 0, MAX_ITERATIONS - 1, WHOLE), (("vcpu_busy_percent", "*"), 0, ONE_CORE, NUM),
             (("window_s",), 0, DAY, NUM), *_EVENTS],
    "session": [(("iteration",), 0, MAX_ITERATIONS - 1, WHOLE), (("boot_seconds",), 0, DAY, NUM)],
    "warmup": [],
    "clock": [(("iteration",), 0, MAX_ITERATIONS - 1, WHOLE)],  # a boot's clocksource before and after its points
    "dropped": [(("iteration",), 0, MAX_ITERATIONS - 1, WHOLE)],  # a study's switch that changed nothing
    "syscalls": _POINT + _CLIENT + _SIDES + [
        (("syscalls", "*"), 0, MOST_COUNT, WHOLE), (("syscalls", "by_call", "*"), 0, MOST_COUNT, WHOLE),
        # the shorter load before the point's own: its seconds, requests and calls
        (("shorter", "seconds"), 0, DAY, NUM), (("shorter", "requests"), 0, MOST_COUNT, WHOLE),
        (("shorter", "server"), 0, MOST_COUNT, WHOLE), (("shorter", "all"), 0, MOST_COUNT, WHOLE),
        (("shorter", "dropped"), 0, MOST_COUNT, WHOLE), (("shorter", "by_call", "*"), 0, MOST_COUNT, WHOLE)],
    # a profiled point ([explain] profile): its stacks in the file it names (analysis/folded.py checks that)
    "profile": _POINT + _CLIENT + _SIDES + [(("profile", "bytes"), 1, MOST, WHOLE),
                                            (("profile", "frequency"), 1, MAX_FREQUENCY, WHOLE)],
}
KINDS = frozenset(RULES)
KEYED = ("measurement", "load", "syscalls", "profile")  # the kinds that are a measured point, each with its key

# why a record is left out, as the report counts them
NUMBER, KIND, AGAIN = "with a number out of range", "of an unknown kind", "repeating a point already measured"
CONTRA = "contradicting the run"  # rundir/cross_check.py


@dataclasses.dataclass(frozen=True)
class Fault:
    why: str  # NUMBER, KIND or AGAIN
    detail: str  # what, in a few words: "client.requests_per_s -5 is below 0"

    def __str__(self) -> str:
        return self.detail


def _numbers(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], float]]:
    """Every number in a value, with its path (booleans are not numbers)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, (*path, str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, (*path, str(i)))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, value


def _at(value: Any, path: tuple[str, ...], where: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """The values at a rule's path in a record, with their own paths."""
    if not path:
        yield where, value
        return
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        items = list(value.items()) if head == "*" else [(head, value[head])] if head in value else []
    elif isinstance(value, list) and head == "*":
        items = list(enumerate(value))
    else:
        items = []
    for k, v in items:
        yield from _at(v, rest, (*where, str(k)))


def _show(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def numbers_fault(rec: dict[str, Any], suspect: bool = True) -> Fault | None:
    """The first number of the record that cannot be a measurement. `suspect`: the reader saw a
    non-finite or huge number while parsing; without it the whole record is not walked."""
    if suspect:
        for path, x in _numbers(rec, ()):
            if not math.isfinite(x) or abs(x) > MOST:
                return Fault(NUMBER, f"{'.'.join(path)} {_show(x)} is "
                                     + ("not a finite number" if not math.isfinite(x) else "beyond 2**63"))
    for path, low, high, whole in RULES.get(rec.get("kind", ""), []) if isinstance(rec.get("kind"), str) else []:
        for where, x in _at(rec, path):
            if not isinstance(x, int | float) or isinstance(x, bool):
                continue  # not a number: type_fault's, or (null, a list) the reader's to refuse (its shape)
            name = ".".join(where)
            if whole and not isinstance(x, int):
                return Fault(NUMBER, f"{name} {_show(x)} is not a whole number")
            if not low <= x <= high:
                return Fault(NUMBER, f"{name} {_show(x)} is {'below' if x < low else 'above'} "
                                     f"{_show(low if x < low else high)}")
    return _percentiles(rec)


def _percentiles(rec: dict[str, Any]) -> Fault | None:
    client = rec.get("client")
    latency = client.get("latency_us") if isinstance(client, dict) else None
    pcts = latency.get("percentiles") if isinstance(latency, dict) else None
    if not isinstance(pcts, dict):
        return None
    last: tuple[str, float] | None = None
    for q in PERCENTILES:
        x = pcts.get(q)
        if not isinstance(x, int | float) or isinstance(x, bool):
            continue
        if last is not None and x < last[1]:
            return Fault(NUMBER, f"client.latency_us.percentiles: p{q} {_show(x)} is below p{last[0]} {_show(last[1])}")
        last = (q, x)
    return None


def point_key(rec: dict[str, Any]) -> str | None:
    """The key a point record's fields give (plan.Point.key), None when a field is missing."""
    inst, conns, it, pct = (rec.get(k) for k in ("instance", "connections", "iteration", "percent"))
    if not isinstance(inst, str) or not all(isinstance(v, int) and not isinstance(v, bool) for v in (conns, it)):
        return None
    if rec.get("kind") == "load":
        return f"{inst}/@{pct}%/{it}" if isinstance(pct, int) and not isinstance(pct, bool) else None
    if rec.get("kind") in ("syscalls", "profile"):
        return f"{inst}/{rec['kind']}/{it}"
    repeat = rec.get("repeat", 0)
    if not isinstance(repeat, int) or isinstance(repeat, bool):
        return f"{inst}/{conns}/{it}/r?"  # not a whole number: no key the harness writes
    return f"{inst}/{conns}/{it}" + (f"/r{repeat}" if repeat else "")


@dataclasses.dataclass
class Seen:
    """The points, targets and capacities among the records kept so far (in file order)."""

    succeeded: set[tuple[str, str]] = dataclasses.field(default_factory=set)  # (kind, key)
    target: bool = False
    machines: set[str] = dataclasses.field(default_factory=set)

    def fault(self, rec: dict[str, Any]) -> Fault | None:
        """Why the record repeats one kept before, if it does; else it is noted as kept."""
        kind = rec.get("kind")
        if kind in KEYED and isinstance(rec.get("key"), str):
            key = rec["key"]
            own = point_key(rec)
            if own is not None and own != key:
                return Fault(AGAIN, f"its key {key!r} is not that of its fields ({own!r})")
            if (kind, key) in self.succeeded:
                return Fault(AGAIN, "its point was measured successfully on an earlier line")
            if rec.get("ok") is True:
                self.succeeded.add((kind, key))
        elif kind == "load_target":
            if self.target:
                return Fault(AGAIN, "a second load_target (the first one holds)")
            self.target = True
        elif kind == "capacity" and isinstance(rec.get("machine"), str):
            if rec["machine"] in self.machines:
                return Fault(AGAIN, f"a second capacity record of {rec['machine']!r}")
            self.machines.add(rec["machine"])
        return None


def fault(rec: dict[str, Any], seen: Seen, suspect: bool = True) -> Fault | None:
    """Why a record (a JSON object) is left out of every figure, or None; `seen` notes those kept."""
    kind = rec.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        shown = repr(kind) if isinstance(kind, str) else "none" if kind is None else f"a {type(kind).__name__}"
        return Fault(KIND, f"kind {shown[:60]} is not one this version writes")
    return numbers_fault(rec, suspect) or seen.fault(rec)


def type_fault(rec: dict[str, Any]) -> str | None:
    """Text or true/false where RULES has a figure (float("1e9") reads the one, True + 1 is 2), or an `ok`
    that is not true or false (`"ok": "false"` is true to `if rec.get("ok")`): a record the harness never
    writes, refused (store.py names its file and line)."""
    if "ok" in rec and not isinstance(rec["ok"], bool):
        return f"with ok {json.dumps(rec['ok'])[:40]}, not true or false"
    for path, _, _, _ in RULES.get(rec["kind"], []) if isinstance(rec.get("kind"), str) else []:
        for where, x in _at(rec, path):
            if isinstance(x, str | bool):
                return f"with {'.'.join(where)} {json.dumps(x)[:40]}, not a number"
    return None


def describe(rec: dict[str, Any], why: Fault) -> str:
    """A left-out record in a few words: its kind and key (or instance), and its fault."""
    if why.why == KIND:
        return why.detail
    kind, key = rec.get("kind"), rec.get("key", rec.get("machine", rec.get("instance")))
    return f"{kind} {key!r}: {why.detail}" if isinstance(key, str) else f"{kind}: {why.detail}"


SHOWN = 3  # left-out records named in the one line that counts them


def summary(left: Sequence[tuple[Path, int, str, str]]) -> str:
    """One line: how many records were left out, why, and the first few by file:line.
    `left`: (file, line, why, description) of each."""
    counts: dict[str, int] = {}
    for _, _, why, _ in left:
        counts[why] = counts.get(why, 0) + 1
    whys = ", ".join(f"{n} {why}" for why, n in counts.items())
    refs = "; ".join(f"{path}:{line} {text}" for path, line, _, text in left[:SHOWN])
    more = f"; and {len(left) - SHOWN} more" if len(left) > SHOWN else ""
    noun = "record" if len(left) == 1 else "records"
    return f"{len(left)} damaged {noun} left out of every figure ({whys}): {refs}{more}"


def load_target(records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """A run's `load_target`, the baseline's peak as it fixed it once (a second one is refused above):
    the open-loop load's target and, with sweep.variants = "peak", the others' count; None before."""
    return next((r for r in records if r.get("kind") == "load_target"), None)
