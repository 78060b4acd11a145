"""A profile's folded stacks, as a run folder keeps them in profiles/ (`inferno-collapse-perf --kernel` on
`perf script`'s text): one line per distinct stack, `comm;frame;...;leaf COUNT`, kernel frames suffixed
`_[k]`, COUNT the nanoseconds of cpu-clock its samples stood for. Read back here, checked against the
digest its record holds, and parsed; what is the CPU idling, the server's work and the
guest's background is said here too.

A profile is read long after it was written, perhaps copied, perhaps damaged: a path in the record that
is not `profiles/<name>.folded`, a link, a file over MAX_FOLDED, bytes other than those the record's
digest names, or a line that is no stack and count is an error naming the file (and line), never an
answer quietly changed, as a damaged record is (loadcurve.damaged)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vmharness import userfile
from vmharness.bench.profile import MAX_FOLDED  # the cap the capture writes under
from vmharness.digits import integer
from vmharness.errors import HarnessError

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,62}")  # an instance's (model/checks.py): a file's name too
FILE = re.compile(r"profiles/[A-Za-z0-9_][A-Za-z0-9._-]{0,120}\.folded")
HEX = re.compile(r"[0-9a-f]{64}")
KERNEL = "_[k]"
IDLE = "do_idle" + KERNEL  # the idle loop every CPU runs when it has nothing to do
SERVER = "nginx"  # the server's processes' name (bench/server.py), the first frame of their stacks
SOFTIRQD = "ksoftirqd/"  # the kernel's threads that finish the softirqs (the network's) interrupts leave
MAX_COUNT = 18  # digits: a count of nanoseconds beyond 10**18 (31 years) is no point's
HINT = ("a run writes its profiles itself, with each file's digest in its record: was the file edited or "
        "replaced? restore it from a copy, or re-measure with --resume")


def kernel(frame: str) -> bool:
    return frame.endswith(KERNEL)


def shown(frame: str) -> str:
    """A frame as the report names it: a kernel one without its suffix (said apart: "(kernel)")."""
    return frame.removesuffix(KERNEL)


def interrupt(frame: str) -> bool:
    """A frame of an interrupt's entry or handling (an exception's entry is an asm_ frame as well)."""
    return frame.startswith("asm_") or "irq" in frame or "sysvec_" in frame or "__do_softirq" in frame


def idle(stack: str) -> bool:
    """The CPU idling: a stack through the idle loop with no interrupt taken in it (an interrupt's work
    done in the idle loop, a network softirq among it, is work)."""
    frames = stack.split(";")
    return IDLE in frames and not any(interrupt(f) for f in frames)


def served(stack: str) -> bool:
    """The server's work: a stack of its processes, or one with an interrupt in it wherever it was
    taken (a request's packets are handled in whatever runs when they come), the CPU idling apart.
    The rest is the guest's background (the harness's samplers, the guest agent, perf itself), which
    takes about as long each second whatever the load, and would grow per request as a variant slows."""
    frames = stack.split(";")
    return not idle(stack) and (frames[0] == SERVER or frames[0].startswith(SOFTIRQD)
                                or any(interrupt(f) for f in frames[1:]))


def parse(text: str, where: Path) -> dict[str, int]:
    """Each stack's count, summed over the lines that name it; a line that is not one is an error."""
    stacks: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        stack, _, count = line.rpartition(" ")
        value = integer(count) if len(count) <= MAX_COUNT else None
        if value is None or not stack or "" in stack.split(";"):
            raise HarnessError(f"{where}: line {n} is not a folded stack (frame;frame;... COUNT): {line[:80]!r}",
                               HINT)
        stacks[stack] = stacks.get(stack, 0) + value
    return stacks


def read(run: Path, profile: Mapping[str, Any], key: object) -> tuple[Path, dict[str, int]]:
    """The stacks of the file a profile record names (`profile`: its "profile" object; `key`: the
    record's, for errors), and the file's path."""
    name, digest = profile.get("file"), profile.get("sha256")
    if not isinstance(name, str) or not FILE.fullmatch(name) or ".." in name:
        raise HarnessError(f"{run}: the profile record {key!r} names {str(name)[:80]!r}, not a file "
                           "profiles/NAME.folded of its run folder", HINT)
    if not isinstance(digest, str) or not HEX.fullmatch(digest):
        raise HarnessError(f"{run}: the profile record {key!r} holds no sha256 digest of its file", HINT)
    path = run / name  # a link in the run folder could lead anywhere: it is never followed (read_inside)
    text = userfile.text(path, MAX_FOLDED, HINT, lambda fault: HarnessError(f"{path} {fault}", HINT), within=run)
    if hashlib.sha256(text.encode()).hexdigest() != digest:
        raise HarnessError(f"{path} does not match its record's digest (profile {key!r})", HINT)
    return path, parse(text, path)
