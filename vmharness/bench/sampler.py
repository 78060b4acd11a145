"""Samplers: a fixed shell loop on every machine of a run (server, clients, and under `run` the host
that runs the guest) prints a snapshot of /proc every `interval` seconds; the harness keeps the stream
in the run directory and summarises the window of each measurement: between the snapshots each
sampler took when woken as the load began and as it ended (each names its wake), or, without them,
what the load generator measured, from the snapshots inside it where they cover it. Nothing is
installed on the machine: bash, cat and date do it. Between snapshots the loop waits on its stdin
(bash's `read -t`): a line from the harness (`wake`, as a load begins and as it ends) takes the next
snapshot at once, so that the snapshots that bound a window come some 0.1 s after the instants they
stand for rather than up to an interval later. Its stdin closed, it sleeps instead.

This is what runs during a measurement: the loop, its processes and the reading of each window. The
stream's format and its parser are the run folder's (rundir/samples.py), as are a window's figures
(rundir/sample_summary.py), since whoever reads a run folder reads them back.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.rundir import sample_summary, samples
from vmharness.rundir.store import RunDir
from vmharness.system import proc
from vmharness.system.machine import Machine

# $1: the interval. `@pid` first, so the harness can read the loop's own CPU time (with its children).
# One cat per snapshot (the files' own headers tell them apart): three forks a second in all. A snapshot
# that answers a wake says which (`@wake N`, the word the harness wrote; only digits are echoed). bash
# reads a pipe a byte at a time, so a timeout can fall inside a word: its rest is read before the next
# snapshot (a word split there made "@wake 2" of wake 12 once in 56 points).
SCRIPT = r"""echo "@pid $$"
w=
while :; do
  echo "@t $(date +%s.%N)"
  case $w in ''|*[!0-9]*) ;; *) echo "@wake $w" ;; esac
  cat /proc/stat /proc/net/dev /proc/interrupts /proc/softirqs /proc/vmstat /proc/[0-9]*/stat 2>/dev/null
  echo "@end"
  w=
  read -r -t "$1" w; r=$?
  if [ $r -gt 128 ] && [ -n "$w" ]; then read -r x; w=$w$x  # timed out inside a word: the rest is coming
  elif [ $r -ne 0 ] && [ $r -le 128 ]; then sleep "$1"  # stdin closed: keep the interval
  fi
done
"""

log = logging.getLogger("vmharness.sampler")


@dataclass
class Samplers:
    """One sampler per machine, streaming into the run directory."""

    run: RunDir
    interval: float
    files: dict[str, Path] = field(default_factory=dict)
    popens: list[subprocess.Popen[bytes]] = field(default_factory=list)
    damaged: set[tuple[str, str]] = field(default_factory=set)  # (machine, snapshot) said to be left out
    woken: int = 0  # the last wake's number

    def start(self, machines: list[Machine]) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for m in machines:
            if m.key in self.files:
                continue
            name = f"{m.key.replace('@', '_').replace('/', '_')}-{stamp}.txt"
            folder = self.run.folder.folder("samples")
            with folder.append(name) as out:  # a regular file of the run's, never through a link
                argv = m.argv(["bash", "-c", SCRIPT, "vmh-sampler", f"{self.interval:g}"])
                self.popens.append(proc.spawn(argv, stdout=out, stdin=subprocess.PIPE, die_with_parent=True))
            self.files[m.key] = folder.path / name

    def wake(self) -> None:
        """Each sampler takes its next snapshot now (a load has just ended), marked with this wake's
        number; one that is gone is left be."""
        self.woken += 1
        for p in self.popens:
            with contextlib.suppress(OSError, ValueError):
                assert p.stdin is not None
                p.stdin.write(f"{self.woken}\n".encode())
                p.stdin.flush()

    def offsets(self) -> dict[str, int]:
        return {label: path.stat().st_size for label, path in self.files.items()}

    def summaries(self, since: dict[str, int], start: float, end: float, roots: dict[str, set[int]],
                  wakes: tuple[int, int] | None = None) -> dict[str, Any]:
        """Each machine's summary of the load's window [start, end] (sample_summary.choose: between the
        snapshots that answer `wakes`, the load's first and last; else the snapshots inside it, or
        padded with one each side), with `window` saying which."""
        # until the snapshot after `end` (or the one that answers the last wake: a machine's clock may
        # run behind this one's) has arrived from every machine (within an interval, mostly)
        deadline = time.monotonic() + min(self.interval, 2.0) + 1.0
        last = wakes[1] if wakes is not None else self.woken or None
        while (not all(samples.has_snapshot_after(path, end, last) for path in self.files.values())
               and time.monotonic() < deadline):
            time.sleep(0.05)
        out = {}
        for label, path in self.files.items():
            try:  # the stream's first snapshot, which names the sampler's PID; then back far enough to
                # hold the snapshot taken before the start (a few tens of KiB): the parser skips the
                # torn snapshot this lands in
                pid, _ = samples.parse(samples.read_from(path, 0, 4096).decode(errors="replace"))
                text = samples.read_from(path, max(0, since.get(label, 0) - (1 << 20))).decode(errors="replace")
            except OSError as exc:
                raise HarnessError(f"the sampler's stream {path} could not be read: {exc.strerror or exc}",
                                   "the run folder's filesystem refused a read; resume the run (run --resume, "
                                   "bench --resume): the points measured are kept") from None
            found: list[tuple[int, str]] = []
            _, snaps = samples.parse(text, found)
            for _, what in found:
                if (label, what) not in self.damaged:
                    self.damaged.add((label, what))
                    log.warning("warning: %s: a damaged snapshot is left out of the points' figures: %s", path, what)
            chosen, how = sample_summary.choose(snaps, start, end, wakes)
            out[label] = {**sample_summary.summarize(chosen, roots.get(label), pid), "window": how}
        return out

    def stop(self) -> None:
        for p in self.popens:
            proc.stop(p, grace=2, group=True)  # the loop's sleep and cat too: they hold the stream open
            with contextlib.suppress(OSError):
                p.stdin.close() if p.stdin is not None else None
