"""Each variant's differential flame graph against the baseline, per request: drawn by inferno's own
tools (inferno-diff-folded, then inferno-flamegraph), run as programs, never reimplemented. Each
profile's work (the server's: the idle loop and the guest's background left out, profiles.py) is first
scaled to nanoseconds per 1000 requests, in whole numbers as inferno reads them, so that the two
profiles compare per request whatever each point served: the graph's widths are the variant's, a frame
red where its time per request grew and blue where it shrank.

inferno is found as the client's oha is (bench/openloop.py: on PATH, else beside this Python, where
`make inferno` installs it); without it the report says so in one line (profiles.MISSING) and draws
nothing. Its SVG carries JavaScript (search, zoom): the page shows it in an <img>, which never runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from vmharness import userfile
from vmharness.analysis.profiles import Profile, View
from vmharness.analysis.switch_why import Why
from vmharness.bench.openloop import local_binary
from vmharness.errors import HarnessError
from vmharness.system import proc
from vmharness.system.owned import Folder
from vmharness.textsafe import line

TOOLS = ("inferno-diff-folded", "inferno-flamegraph")
PER = 1000  # requests: the graph's unit is nanoseconds per this many
COUNTNAME = f"ns per {PER} requests"
MINWIDTH = "0.5"  # percent of the width: narrower frames are left out, and with them the deepest towers (2,134 px of
# a real guest's stacks drawn whole, 486 px so)
TIMEOUT = 120.0  # seconds for each tool: a profile of 32 MiB takes about a second
MAX_SVG = 64 << 20  # bytes: what inferno writes is read back at most this much
MAX_ERR = 64 << 10  # bytes of a tool's error output kept to say why it failed


def found() -> tuple[str, str] | None:
    """The two programs, or None when either is missing."""
    paths = tuple(local_binary(name) for name in TOOLS)
    if all(shutil.which(p) for p in paths):
        return paths[0], paths[1]
    return None


def file_name(instance: str) -> str:
    return f"flame-{instance}.svg"


def switch_file(switch: str) -> str:
    """A study's switch's graph: named apart from every instance's (file_name's begin with flame-); a
    label's side (host:spectre_v2) is written with '-', a file name's letter like the switches' own."""
    return f"switch-flame-{switch.replace(':', '-')}.svg"


def scaled(p: Profile) -> str:
    """The profile's work as folded text, each count in nanoseconds per PER requests (none of 0). A
    frame's name comes from the run folder: its control and direction characters are escaped
    (textsafe.line) before inferno reads it, which escapes what is markup in XML but passes those
    through, into an SVG no XML parser reads and a name shown in another order than it is."""
    counts: dict[str, int] = {}
    for stack, ns in p.work.items():
        shown = line(stack)
        counts[shown] = counts.get(shown, 0) + ns  # two names may escape alike: one stack then
    return "".join(f"{stack} {count}\n" for stack, ns in sorted(counts.items())
                   if (count := round(ns * PER / p.requests)))


def draw(v: View | None, folder: Folder, switches: tuple[Why, ...] = ()) -> list[Path]:
    """Each variant's graph against the baseline, and in a study each explained switch's (its reference
    against the switch turned off: red where the switch's time grew), written into the report's folder;
    none without inferno."""
    tools = found()
    if v is None or tools is None:
        return []
    written = []
    for base, p, name in _pairs(v, switches):
        svg = _svg(tools, base, p, f"{p.instance} against {base.instance}: time per {PER} requests "
                                   f"(red: grew, blue: shrank; the server's work alone)")
        written.append(folder.write(name, svg))
    return written


def names(v: View | None, switches: tuple[Why, ...] = ()) -> list[str]:
    """The files `draw` writes (a report checks each before it writes any)."""
    return [] if v is None or found() is None else [name for _, _, name in _pairs(v, switches)]


def _pairs(v: View, switches: tuple[Why, ...]) -> list[tuple[Profile, Profile, str]]:
    by = {p.instance: p for p in v.profiles}
    pairs = [(v.profiles[0], p, file_name(p.instance)) for p in v.profiles[1:]] if v.growers else []
    return pairs + [(by[w.against], by[w.reference], switch_file(w.switch)) for w in switches if w.grew is not None]


def _svg(tools: tuple[str, str], base: Profile, variant: Profile, title: str) -> bytes:
    try:
        with tempfile.TemporaryDirectory(prefix="vmharness-flame-") as tmp:
            d = Path(tmp)
            (d / "base.folded").write_text(scaled(base))
            (d / "variant.folded").write_text(scaled(variant))
            _run([tools[0], d / "base.folded", d / "variant.folded"], d / "diff.folded", d)
            _run([tools[1], "--title", title, "--countname", COUNTNAME, "--minwidth", MINWIDTH, d / "diff.folded"],
                 d / "flame.svg", d)
            return userfile.read(d / "flame.svg", MAX_SVG, "inferno-flamegraph wrote more than a report holds")
    except OSError as exc:
        raise HarnessError(f"cannot draw the flame graph of {variant.instance}: {exc.strerror}",
                           "check the space in the temporary folder ($TMPDIR)") from exc


def _run(argv: list[str | Path], out: Path, tmp: Path) -> None:
    """One tool, its output into `out` (read back capped), its errors kept to say why it failed."""
    with open(out, "wb") as stdout, open(tmp / "stderr", "wb") as stderr:
        p = proc.spawn(argv, stdout=stdout.fileno(), stderr=stderr.fileno())
        try:
            code = p.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            proc.stop(p)
            raise HarnessError(f"{os.path.basename(argv[0])} did not finish within {TIMEOUT:g} s",
                               "the profile may be far larger than a point's") from exc
    if code != 0:
        with open(tmp / "stderr", "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - MAX_ERR))
            said = f.read(MAX_ERR).decode(errors="replace").strip().splitlines()
        how = proc.Result(tuple(map(str, argv)), code, "", "").how
        raise HarnessError(f"{os.path.basename(argv[0])} failed ({how}): {said[-1][:200] if said else 'no output'}",
                           "run `make inferno` to reinstall it")
