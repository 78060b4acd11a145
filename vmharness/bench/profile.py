"""The server's profile over one extra point (`[explain] profile`): `perf record -e cpu-clock -a -g` on
every CPU of the machine that serves, with call graphs, started before the point with its events off
and switched on and off through perf's own control FIFO (`--control`) around the load alone, so that
perf's start-up (seconds under TCG) and its exit are outside the window; then `perf script` there and
inferno's `collapse-perf` here, which folds the stacks and weighs each by its sample period (cpu-clock's
is nanoseconds: the folded counts are time). cpu-clock is a software clock: it samples where a guest
has no PMU (TCG), at the cost of a timer interrupt per sample; the point's throughput is set beside the
unprofiled one in the report (the profiler's cost) and never mixed into the statistics.

Written here rather than with `perf record -- sleep`: the window would start whenever perf is ready,
not with the load. The guest is discarded after its boot, so a perf the harness lost ends with it; on a
machine it keeps, the profile's folder and process are removed when the point ends."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vmharness.errors import HarnessError
from vmharness.system.machine import Machine

FREQUENCY = 999  # samples per second and CPU: not a multiple of the kernel's tick, as perf's own default
MAX_SCRIPT = 256 << 20  # bytes of `perf script` text read back: about 250,000 samples with call graphs
MAX_FOLDED = 32 << 20  # bytes of folded stacks kept in the run folder (and read back: analysis/folded.py)
HINT = "the image needs linux-perf (images/recipe.toml); turn [explain] profile off to run without it"
# $1 the folder, $2 samples per second. perf starts with its events off (-D -1) and the FIFOs as its
# control; `sleep` is only what it waits on. Prints perf's PID once it runs. `-B`: no pass over the
# samples for build IDs at perf's exit, which `perf script` here does not use (the same symbols
# resolved; perf's exit took 0.7 s with it, 1.9 s without, in a guest under TCG).
_START = ('command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 3; }; '
          'mkfifo "$1/ctl" "$1/ack" && { setsid perf record --control "fifo:$1/ctl,$1/ack" -D -1 -B -F "$2" '
          '-e cpu-clock -a -g -o "$1/perf.data" -- sleep 86400 >"$1/perf.log" 2>&1 </dev/null & echo $!; }')
# bash: $1 the folder, $2 enable or disable, $3 perf's PID. The FIFOs are opened without waiting for perf
# to open them, the word written, and perf's `ack` waited for while perf lives: one that exited (a perf
# that cannot run) is said at once instead of at the timeout. A read that times out keeps what it had
# read of the line (bash reads a FIFO a byte at a time: a guest held off its CPU can time out between
# "a" and "ck"), so the parts are joined: a clean clone's demo beside the rig lost a profile to that.
_SAY = ('exec 3<>"$1/ctl" 4<>"$1/ack"; echo "$2" >&3; got=; '
        'until read -r -t 0.2 part <&4; do got="$got$part"; kill -0 "$3" 2>/dev/null || exit 4; done; '
        '[ "$got$part" = ack ]')
# $1 the folder, $2 perf's PID: perf stopped as ^C stops it (it writes its file), waited for
_STOP = 'kill -INT "$2" 2>/dev/null; while kill -0 "$2" 2>/dev/null; do sleep 0.1; done; tail -c 2000 "$1/perf.log"'
_SCRIPT = 'perf script -i "$1/perf.data" 2>/dev/null | head -c "$2"'


@dataclass
class Perf:
    """perf record running on `machine`, its events off until `on`."""

    machine: Machine
    folder: str
    pid: int

    @classmethod
    def start(cls, m: Machine, frequency: int = FREQUENCY) -> Perf:
        made = m.run(["mktemp", "-d", "/tmp/vmh-profile.XXXXXX"], timeout=30, check=False)
        folder = made.stdout.strip()
        if not made.ok or not folder.startswith("/tmp/vmh-profile."):
            raise HarnessError(f"cannot make a folder for the profile on {m.label}: {made.stderr.strip()[:200]}", HINT)
        res = m.run(["sh", "-c", _START, "sh", folder, str(frequency)], timeout=30, check=False)
        pid = res.stdout.strip()
        if not res.ok or not pid.isdigit():
            _remove(m, folder)
            raise HarnessError(f"perf record did not start on {m.label}: {res.stderr.strip()[:200] or 'no PID'}", HINT)
        perf = cls(m, folder, int(pid))
        try:
            perf._say("disable")  # answers once perf is ready: its set-up is over before the load
        except HarnessError:
            perf.discard()
            raise
        return perf

    def _say(self, word: str) -> None:
        res = self.machine.run(["timeout", "120", "bash", "-c", _SAY, "bash", self.folder, word, str(self.pid)],
                               timeout=150, check=False)
        if not res.ok:
            log = self.machine.run(["tail", "-c", "300", f"{self.folder}/perf.log"], timeout=30, check=False).stdout
            raise HarnessError(f"perf on {self.machine.label} did not answer {word!r}: {log.strip() or 'no answer'}",
                               HINT)

    def on(self) -> None:
        self._say("enable")

    def off(self) -> None:
        self._say("disable")

    def script(self) -> str:
        """perf stopped, and its samples as `perf script` prints them (at most MAX_SCRIPT bytes)."""
        self.machine.run(["timeout", "120", "sh", "-c", _STOP, "sh", self.folder, str(self.pid)], timeout=150,
                         check=False)
        res = self.machine.run(["sh", "-c", _SCRIPT, "sh", self.folder, str(MAX_SCRIPT + 1)], timeout=600,
                               check=False)
        if not res.ok or not res.stdout.strip():
            raise HarnessError(f"perf script on {self.machine.label} printed no samples", HINT)
        if len(res.stdout.encode()) > MAX_SCRIPT:
            raise HarnessError(f"perf script on {self.machine.label} printed over {MAX_SCRIPT >> 20} MiB",
                               "shorten [explain] duration")
        return res.stdout

    def discard(self) -> None:
        """perf stopped and its folder removed (what a failed point leaves)."""
        self.machine.run(["timeout", "120", "sh", "-c", _STOP, "sh", self.folder, str(self.pid)], timeout=150,
                         check=False)
        _remove(self.machine, self.folder)


def _remove(m: Machine, folder: str) -> None:
    m.run(["rm", "-rf", "--", folder], timeout=60, check=False)


def fold(script: str, collapse: str) -> str:
    """`perf script` text folded by inferno's collapse-perf (kernel frames marked `_[k]`)."""
    try:
        p = subprocess.run([collapse, "--kernel", "--quiet"], input=script, capture_output=True, text=True,
                           timeout=300, check=False)
    except FileNotFoundError:
        raise HarnessError(f"{collapse} is not installed", "make inferno (or cargo install inferno)") from None
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{collapse} took over 300 s", "shorten [explain] duration") from None
    if p.returncode != 0 or not p.stdout.strip():
        raise HarnessError(f"{collapse} folded nothing: {p.stderr.strip()[:200]}", "check the guest's perf")
    if len(p.stdout.encode()) > MAX_FOLDED:
        raise HarnessError(f"the folded profile is over {MAX_FOLDED >> 20} MiB", "shorten [explain] duration")
    return p.stdout


def take(m: Machine, measure: Callable[[], dict[str, Any]], collapse: str) -> tuple[dict[str, Any], str | None]:
    """One point measured with perf sampling around it: (the point's result, its folded stacks, or None
    if the point failed). A result over more than one attempt is not a profile of its requests."""
    perf = Perf.start(m)
    try:
        perf.on()
        result = measure()
        perf.off()
        if result["ok"] and result["attempts"] > 1:
            result = {**result, "ok": False, "error": "profiled over more than one attempt: not a profile per request"}
        folded = fold(perf.script(), collapse) if result["ok"] else None
    finally:
        perf.discard()
    return result, folded


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
