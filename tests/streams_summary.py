"""The suite's last lines (tests/streams.py). The project's CI keeps only the tail of a run's output, and
twice a run stopped at the streams' deadline showed there nothing but the linters' pytest, which had
started after it: not which tests had taken the time, nor where the deadline found each stream. So the
launcher ends with what each pytest's JUnit XML and log hold: the slowest tests of all the streams, each
stream's counts, the tests that did not pass, and the line where a deadline's Ctrl-C interrupted one.
Each test that did not pass comes with where it failed and the start of its message: CI's run of 2ed2e31
failed 14 host tests and its tail named them and nothing else.

The XML and logs read here are the ones this run's pytests wrote into .cache/test-streams/."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

# pytest's last traceback line for a test stopped by Ctrl-C: "tests/integration/test_x.py:123: KeyboardInterrupt"
INTERRUPTED = re.compile(r"^(\S+\.py:\d+): KeyboardInterrupt$", re.MULTILINE)
OUTCOMES = ("failure", "error", "skipped")
CPU = "cpu_seconds"  # tests/stream_cpu.py's JUnit property
WIDTH = 100  # characters of a test's name
WHY = 400  # characters of a failure's message, on one line
# a traceback's line that names where it stopped: "tests/integration/test_x.py:123: AssertionError"
WHERE = re.compile(r"^(\S+\.py:\d+): \w+$", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    stream: str
    name: str  # module::test
    seconds: float
    outcome: str  # passed, or one of OUTCOMES
    why: str = ""  # a failure's or an error's place and message, on one line
    cpu: float | None = None  # seconds of CPU its stream used meanwhile (tests/stream_cpu.py), where measured


def why(element: ET.Element) -> str:
    """Where a failed test stopped (its traceback's last file:line) and its message's start, on one line."""
    places = WHERE.findall(element.text or "")
    message = " ".join((element.get("message") or "").split())
    text = f"{places[-1]}: {message}" if places else message
    return text if len(text) <= WHY else text[:WHY - 3] + "..."


def cpu(case: ET.Element) -> float | None:
    """The test's `cpu_seconds` property, if its pytest measured one (a number, or nothing)."""
    for prop in case.iter("property"):
        if prop.get("name") == CPU:
            try:
                return float(prop.get("value") or "")
            except ValueError:
                return None
    return None


def cases(stream: str, junit: Path) -> list[Case]:
    """A pytest's tests as its JUnit XML records them (none where it wrote none: killed, or never started)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    found = []
    for case in root.iter("testcase"):
        if case.get("name") is None:  # the test a Ctrl-C stopped: nameless, "0.000" (its line is in the log)
            continue
        module = case.get("classname", "").rsplit(".", 1)[-1]
        outcome = next((o for o in OUTCOMES if case.find(o) is not None), "passed")
        bad = case.find(outcome) if outcome in ("failure", "error") else None
        found.append(Case(stream, f"{module}::{case.get('name')}", float(case.get("time") or 0), outcome,
                          why(bad) if bad is not None else "", cpu(case)))
    return found


# pytest -q's line for each test file: its path, then a character per test as each ends
PROGRESS = re.compile(r"^(tests/\S+\.py) [.FEsxX]*", re.MULTILINE)


def interrupted_at(log: Path) -> list[str]:
    """Where the deadline's Ctrl-C stopped a test: its file:line; where that is outside the test's own
    file (a wait in the standard library's selectors.py, seen in a clean clone), with the test file
    pytest was in."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    files = PROGRESS.findall(text)
    return [where if not files or where.split(":")[0].endswith(files[-1]) else f"{where} (in {files[-1]})"
            for where in dict.fromkeys(INTERRUPTED.findall(text))]


def lines(junits: dict[str, list[Path]], logs: dict[str, Path], slowest: int = 8) -> list[str]:
    """The summary's lines: the slowest tests first, then each stream's counts, what did not pass, and
    where a test was interrupted."""
    every = [c for name, paths in junits.items() for p in paths for c in cases(name, p)]
    out = [f"===== the {min(slowest, len(every))} slowest tests (s of wall, then of their stream's CPU; set-up "
           "and teardown included) ====="]
    out += [f"{c.seconds:6.0f} {'-' if c.cpu is None else f'{c.cpu:.0f}':>6} {c.stream:5} {c.name[:WIDTH]}"
            for c in sorted(every, key=lambda c: c.seconds, reverse=True)[:slowest]]
    counts = []
    for name in junits:
        mine = [c for c in every if c.stream == name]
        tally = {o: sum(c.outcome == o for c in mine) for o in ("passed", *OUTCOMES)}
        counts.append(f"{name}: " + ", ".join(f"{n} {o}" for o, n in tally.items() if n or o == "passed")
                      + f" in {sum(c.seconds for c in mine) / 60:.1f} test-min"
                      + (f" ({sum(c.cpu for c in mine if c.cpu is not None) / 60:.1f} CPU-min)"
                         if any(c.cpu is not None for c in mine) else ""))
    out.append("===== " + "; ".join(counts) + " =====")
    for c in every:
        if c.outcome in ("failure", "error"):
            out += [f"not passed: {c.stream} {c.name[:WIDTH]} ({c.outcome})", f"    {c.why}"]
    out += [f"interrupted: {name} at {where}" for name, log in logs.items() for where in interrupted_at(log)]
    return out
