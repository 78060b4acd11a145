"""Commands that read, list or write several files on a machine in one round trip each, through a
command runner (ssh, or a guest's agent), each answered as HostRoot would answer it here: a regular file
only, no more than MAX_READ bytes, a missing one as None. Over a guest's agent each round trip costs some
0.1-0.2 s under TCG, and tuning a guest reads and writes a score of files. The scripts take every path
and value as an argument: nothing a run or a machine says reaches the shell's text."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vmharness.errors import HarnessError
from vmharness.system import proc
from vmharness.userfile import MAX_READ

# Run on the machine: $1 the path, $2 the most bytes to print. Exit 3: missing; 4: not a regular file.
_READ = '[ -e "$1" ] || exit 3; [ -f "$1" ] || exit 4; exec head -c "$2" -- "$1"'

Runner = Callable[[list[str]], proc.Result]  # runs argv on a machine, check=False


def _cut_short(what: str) -> HarnessError:
    """A batch whose output ended before the answer to `what` (a file's, or a listing's)."""
    return HarnessError(f"{what} is cut short", "the machine's shell or its connection failed mid-way: try again")


def read_with(run: Runner, path: str, where: str, limit: int = MAX_READ) -> str | None:
    """A file's text stripped, read by a command runner (ssh, a guest's agent), as
    HostRoot.read_optional reads one here: None if it is missing or cannot be read; an error if it
    is not a regular file or holds more than `limit` bytes."""
    return answer(run(["sh", "-c", _READ, "sh", path, str(limit + 1)]), path, where, limit, "reading")


def answer(res: proc.Result, path: str, where: str, limit: int, doing: str) -> str | None:
    """What a command that ends by printing a file (_READ, or a write that reads it back) says of it:
    its text stripped; None if it is missing (exit 3) or the kernel refused it (1); an error if it is not
    a regular file (4), is larger than `limit`, or the command failed otherwise."""
    if res.returncode == 4:
        raise HarnessError(f"{path} on {where} is not a regular file: refusing to read it",
                           "the harness reads kernel attributes and small text files only")
    if res.returncode in (1, 3):  # missing, or refused by the kernel (head says why on stderr)
        return None
    if not res.ok:
        raise res.failure(f"{doing} {path} on {where}: ")
    if len(res.stdout.encode()) > limit:
        raise HarnessError(f"{path} on {where} is larger than {limit} bytes: refusing to read it",
                           "a kernel attribute is never this big")
    return res.stdout.strip()


# Run on the machine: $1 a marker, $2 the most bytes to print of each file, then the paths. Each file
# is "MARKER 3" (missing), "MARKER 4" (not a regular file) or "MARKER 0", its bytes, "MARKER end STATUS".
_READ_MANY = ('m=$1; n=$2; shift 2; for p; do if [ ! -e "$p" ]; then echo "$m 3"; elif [ ! -f "$p" ]; '
              'then echo "$m 4"; else echo "$m 0"; head -c "$n" -- "$p" 2>/dev/null; s=$?; echo; '
              'echo "$m end $s"; fi; done')


Answer = str | HarnessError | None  # a file's text, None (missing or unreadable), or the error reading it is


def read_many(run: Runner, paths: Sequence[str], where: str, limit: int = MAX_READ) -> dict[str, Answer]:
    """Several files in one command, each answered as read_with would answer it: its text, None, or the
    error read_with would raise (kept, to be raised when that file is read). One round trip in place of
    one per file: over a guest's agent each costs about 0.1 s."""
    if not paths:
        return {}
    mark = f"@vmh-{secrets.token_hex(8)}"
    res = run(["sh", "-c", _READ_MANY, "sh", mark, str(limit + 1), *paths])
    if not res.ok:
        raise res.failure(f"reading {len(paths)} files on {where}: ")
    out: dict[str, Answer] = {}
    rest = res.stdout
    for path in paths:
        head, _, rest = rest.partition("\n")
        out[path], rest = _framed(head, rest, mark, path, where, limit, f"reading {len(paths)} files")
    return out


def _framed(head: str, rest: str, mark: str, path: str, where: str, limit: int, doing: str) -> tuple[Answer, str]:
    """One file's answer in a batch's output, from its first line `head` ("MARK 3", "MARK 4" or "MARK 0"
    and the text up to "MARK end STATUS"), and what follows it."""
    if head == f"{mark} 3":
        return None, rest
    if head == f"{mark} 4":
        return HarnessError(f"{path} on {where} is not a regular file: refusing to read it",
                            "the harness reads kernel attributes and small text files only"), rest
    if head == f"{mark} 0" and (end := rest.find(f"\n{mark} end ")) >= 0:
        text, rest = rest[:end], rest[end + len(mark) + 6:]
        status, _, rest = rest.partition("\n")
        if len(text.encode()) > limit:
            return HarnessError(f"{path} on {where} is larger than {limit} bytes: refusing to read it",
                                "a kernel attribute is never this big"), rest
        return (text.strip() if status == "0" else None), rest
    raise _cut_short(f"{doing} on {where}: its answer for {path}")


# Run on the machine: $1 a marker, then the folders. Each folder's entries (those `ls` lists: not the
# dot ones; a dangling link too), a line each, then the marker alone: the shell's own glob, no program
# started per folder.
_LIST_MANY = ('m=$1; shift; for d; do for f in "$d"/*; do if [ -e "$f" ] || [ -L "$f" ]; then '
              'printf "%s\\n" "${f##*/}"; fi; done; echo "$m"; done')


def list_many(run: Runner, paths: Sequence[str], where: str) -> dict[str, list[str]]:
    """Several folders' entries in one command, each sorted: none for a folder that is missing or cannot be
    read (as a listing by `ls` that failed). One round trip in place of one per folder."""
    if not paths:
        return {}
    mark = f"@vmh-{secrets.token_hex(8)}"
    res = run(["sh", "-c", _LIST_MANY, "sh", mark, *paths])
    if not res.ok:
        raise res.failure(f"listing {len(paths)} folders on {where}: ")
    listed: list[list[str]] = []
    names: list[str] = []
    for line in res.stdout.splitlines():
        if line == mark:
            listed.append(sorted(names))
            names = []
        else:
            names.append(line)
    if len(listed) != len(paths) or names:
        raise _cut_short(f"listing {len(paths)} folders on {where}: its answer")
    return dict(zip(paths, listed, strict=True))


# Run on the machine: $1 a marker, $2 the most bytes to print of each file read back, $3 `set` (each
# file read back after its write, as _READ_MANY frames it; the first write refused or file not regular
# ends the batch) or `write` (no read back: "MARKER ok"; a refusal does not end it), then pairs of value
# and path. Each pair begins "MARKER w"; a refused write prints what the shell said, then "MARKER 5".
_WRITE_MANY = ('m=$1; n=$2; mode=$3; shift 3; while [ $# -gt 1 ]; do echo "$m w"; '
               'if { printf "%s\\n" "$1" > "$2"; } 2>&1; then if [ "$mode" = write ]; then echo "$m ok"; '
               'elif [ ! -f "$2" ]; then echo "$m 4"; exit 0; else echo "$m 0"; head -c "$n" -- "$2" 2>/dev/null; '
               's=$?; echo; echo "$m end $s"; fi; else echo "$m 5"; [ "$mode" = write ] || exit 0; fi; '
               'shift 2; done')


@dataclass(frozen=True)
class Refused:
    """A write the machine refused, and what its shell said of it."""

    why: str


Written = Answer | Refused  # a file's answer read back after its write (None in `write` mode), or its refusal


def write_many(run: Runner, pairs: Sequence[tuple[str, str]], where: str, read_back: bool,
               limit: int = MAX_READ) -> list[Written]:
    """Several (path, value) writes in one command, in order, each value written with a newline. With
    `read_back`, each file is then answered as read_with answers it, and the batch ends at the first
    write refused or file that is not regular: the answers are of the writes made, the last maybe
    refused. Without, every write is tried, each answered None or its refusal. One round trip in
    place of one per file (over a guest's agent, some 0.2 s each under TCG)."""
    if not pairs:
        return []
    mark = f"@vmh-{secrets.token_hex(8)}"
    res = run(["sh", "-c", _WRITE_MANY, "sh", mark, str(limit + 1), "set" if read_back else "write",
               *(x for path, value in pairs for x in (value, path))])
    doing = f"writing {len(pairs)} files"
    if not res.ok:
        raise res.failure(f"{doing} on {where}: ")
    out: list[Written] = []
    rest = res.stdout
    for path, _ in pairs:
        if not rest:
            break
        head, _, rest = rest.partition("\n")
        said, _, rest = rest.partition("\n")
        told = []
        while said not in (f"{mark} ok", f"{mark} 5", f"{mark} 4", f"{mark} 0") and rest:
            told.append(said)
            said, _, rest = rest.partition("\n")
        if head != f"{mark} w" or said not in (f"{mark} ok", f"{mark} 5", f"{mark} 4", f"{mark} 0"):
            raise _cut_short(f"{doing} on {where}: its answer for {path}")
        if said == f"{mark} 5":
            out.append(Refused((told or ["write failed"])[-1].strip()))
        elif said == f"{mark} ok":
            out.append(None)
        else:
            got, rest = _framed(said, rest, mark, path, where, limit, doing)
            out.append(got)
    if len(out) < len(pairs) and not (read_back and out and isinstance(out[-1], Refused | HarnessError)):
        raise _cut_short(f"{doing} on {where}: its answer for {pairs[len(out)][0]}")
    return out
