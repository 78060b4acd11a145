"""The machinery of the hostile tables (tests/unit/test_hostile*.py): a case is a command line run for
real (`python -m vmharness.cli`, in a process forked from one that imported it: tests/forked_cli.py) in
a fresh working folder laid out by its `build`; it must end in its
exit code (2: exactly one `error:` line naming what is wrong, then one `hint:` line), with no traceback,
within a time limit, and with nothing changed outside what it may write: its working folder (canary files
and link targets placed there by `build` included) byte for byte, a `--host-root` tree inside it, the
files named in `outside` (absolute canaries), and nothing left in its /tmp or /run/vmharness. Each
command has a /tmp and a /run/vmharness of its own (tests/own_mounts.py: folders of the case bound over
those paths in a mount namespace of its own), so that a second harness on the machine (another `make
test` beside this one) neither fails a case with its files nor changes what a command reads there.
Cases run two at a time (two cores).

A table module holds `CASES` and three lines:

    outcomes = hostile_kit.fixture(CASES)

    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_...(case, outcomes): hostile_kit.check(case, outcomes.by_case[case.id])

and `test_..._changed_nothing_outside(outcomes)`: `hostile_kit.check_global(outcomes)`."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import forked_cli
from tests.fakehost import FakeHost
from tests.own_mounts import KVM_PROBE, Own

MLX, CX5 = 0x15B3, 0x1017
Build = Callable[[Path], None]  # lays out the case's working folder (cwd) before the command runs
PWNED = "/tmp/vmh-hostile-pwned"  # what an injected command would create


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    needles: tuple[str, ...]  # each must appear in the error line
    build: Build | None = None
    env: dict[str, str] = field(default_factory=dict)
    code: int = 2
    may_write: tuple[str, ...] = ()  # paths under the working folder the command may create
    # absolute paths outside the working folder that a case aims at: made by `build` (canaries), and
    # compared byte for byte (or their absence) before and after
    outside: tuple[str, ...] = ()


# working folders ------------------------------------------------------------------------------
def snapshot_host(cwd: Path) -> None:
    host = FakeHost(cwd / "snap", nodes=2, node_mib=1024)
    host.pci("0000:b3:00.0", MLX, CX5, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f0",))
    host.pci("0000:00:02.0", 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
    host.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    host.finish()


def with_fifo(cwd: Path) -> None:
    snapshot_host(cwd)
    attr = cwd / "snap/sys/bus/pci/devices/0000:b3:00.0/class"
    real = (cwd / "snap/sys/bus/pci/devices/0000:b3:00.0").resolve() / "class"
    real.unlink()
    os.mkfifo(real)
    assert attr.exists()


def fifo_at(rel: str) -> Build:
    def build(cwd: Path) -> None:
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(cwd / rel)
    return build


def with_file(rel: str, content: str | bytes) -> Build:
    def build(cwd: Path) -> None:
        path = cwd / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return build


def both(*builds: Build) -> Build:
    def build(cwd: Path) -> None:
        for b in builds:
            b(cwd)
    return build


def snapshot_with(rel: str, content: str | bytes) -> Build:
    """The snapshot host with one of its files replaced (the path is followed through sysfs links)."""
    def build(cwd: Path) -> None:
        snapshot_host(cwd)
        path = cwd / "snap" / rel
        target = path.resolve() if path.exists() else path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return build


def snapshot_without(rel: str) -> Build:
    def build(cwd: Path) -> None:
        snapshot_host(cwd)
        (cwd / "snap" / rel).unlink()
    return build


def bench_toml(body: str | bytes) -> Build:
    return with_file("c.toml", body)


def run_toml(body: str) -> Build:
    return with_file("r.toml", body)


def a_run_dir(manifest: str | bytes, records: str | bytes | None = None) -> Build:
    def build(cwd: Path) -> None:
        with_file("rd/manifest.json", manifest)(cwd)
        if records is not None:
            with_file("rd/records.jsonl", records)(cwd)
    return build


GOOD_MANIFEST = ('{"kind": "bench", "config": {"instance": [{"name": "a"}, {"name": "b"}]}, '
                 '"started": "2026-01-01T00:00:00Z", "ended": null}')


def measurement(inst: str, conns: int, it: int, rps: float) -> str:
    latency = {"percentiles": {"50": 100, "90": 200, "99": 300, "99.9": 400}}
    record = {"kind": "measurement", "key": f"{inst}/{conns}/{it}", "instance": inst, "connections": conns,
              "iteration": it, "ok": True, "samples": {},
              "client": {"requests_per_s": rps, "requests": 1000, "errors": {"total": 0}, "latency_us": latency}}
    return json.dumps(record) + "\n"


GOOD_RECORDS = "".join(measurement(i, c, it, 1000 + c) for it in range(2) for c in (1, 2) for i in ("a", "b"))
NON_UTF8 = b"[sweep]\nconnections = \"\xff\xfe\"\n"
HOSTILE_HOST = "-oProxyCommand=touch " + PWNED

S = ("--host-root", "snap")


TIMEOUT = 60.0


def _digest(path: Path) -> str:
    """The file's content by sha256, its holes named by where they lie instead of read: the bounds
    tables plant sparse files of up to 3 GiB, which took about 10 s of CPU to read and hash before and
    after their case. Any change of content changes it (a write into a hole makes data there), and
    where the filesystem tells no holes the whole file is read as data."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        h.update(b"%d\n" % size)
        at = 0
        while at < size:
            try:
                start = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: only a hole is left
                    raise
                break
            at = os.lseek(fd, start, os.SEEK_HOLE)
            h.update(b"%d:%d\n" % (start, at))
            f.seek(start)
            while (left := at - f.tell()) > 0 and (chunk := f.read(min(left, 1 << 20))):
                h.update(chunk)
    return h.hexdigest()


def _tree(path: Path) -> dict[str, str]:
    """Every entry below path: a file's digest, a link's target, anything else by its kind."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        elif not p.is_file():
            out[rel] = "special"  # a FIFO, a socket (an ssh control socket in /run/vmharness): never opened
        else:
            out[rel] = _digest(p)
    return out


def _outside(case: Case) -> dict[str, str]:
    """The case's absolute canaries, each by its digest (or "absent"), keyed by the absolute path."""
    out: dict[str, str] = {}
    for name in case.outside:
        p = Path(name)
        if p.is_symlink():
            out[name] = "-> " + os.readlink(p)
        elif p.is_file():
            out[name] = _digest(p)
        else:
            out[name] = "dir" if p.is_dir() else "absent" if not os.path.lexists(p) else "special"
    return out


def _left(own: Own, before: dict[str, str]) -> list[str]:
    """What the command left in its own /tmp and /run/vmharness: every entry made, changed or removed
    there, but the lock (its content the holder's PID) and the KVM probe's answer, kept there by
    whichever command probes first in this boot (host/inspect/kvm_memo.py)."""
    after = _tree(own.root)
    kept = ("run/lock", f"run/{KVM_PROBE}")
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and k not in kept)


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    before: dict[str, str]
    after: dict[str, str]
    cwd: Path | None = None  # the case's working folder, to read what it wrote
    left: list[str] = field(default_factory=list)  # what it left in its own /tmp and /run/vmharness


def _run(case: Case, base: Path, owns: Path) -> Outcome:
    cwd = base / case.id
    cwd.mkdir()
    if case.build:
        case.build(cwd)
    own = Own.make(owns / case.id, base)
    own_before = _tree(own.root)
    before = {**_tree(cwd), **_outside(case)}
    # not the test's $TMPDIR (tests/unit/conftest.py): the command's /tmp is its own, and that folder is not in it
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMHARNESS_") and k != "TMPDIR"}
    env.update(case.env)
    out, err = base / f"{case.id}.stdout", base / f"{case.id}.stderr"
    code = forked_cli.run(case.argv, cwd, env, TIMEOUT, out, err, own.request())
    said = (out.read_text(errors="replace"), err.read_text(errors="replace"))
    if code is None:
        code, said = -1, (said[0], said[1] + f"hung for {TIMEOUT:g} s")
    return Outcome(code, *said, before, {**_tree(cwd), **_outside(case)}, cwd, _left(own, own_before))


@dataclass
class Outcomes:
    by_case: dict[str, Outcome]


def fixture(cases: list[Case]) -> object:
    """A module-scoped fixture that runs every case once, two at a time."""
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "two cases share an id"

    @pytest.fixture(scope="module")
    def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
        base, owns = tmp_path_factory.mktemp("hostile"), tmp_path_factory.mktemp("hostile-own")
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = dict(zip(ids, pool.map(lambda c: _run(c, base, owns), cases), strict=True))
        return Outcomes(results)

    return outcomes


def check_global(outcomes: Outcomes) -> None:
    """No case left anything in its own /tmp or /run/vmharness, and no injected command ran (its canary
    would be in the command's own /tmp, or in this machine's had the command got out of its namespace)."""
    left = {cid: o.left for cid, o in outcomes.by_case.items() if o.left}
    assert not left, f"left in a command's own /tmp or /run/vmharness: {left}"
    assert not Path(PWNED).exists(), f"an injected command ran: {PWNED} exists"


def check(case: Case, o: Outcome) -> None:
    """The case ended as its table says: the exit code, one error line and one hint naming the needles
    (or, for another code, a line of output holding them), no traceback, and nothing changed but what
    it may write."""
    assert "Traceback" not in o.stderr + o.stdout, o.stderr
    assert o.code == case.code, (o.code, o.stdout[-500:], o.stderr)
    lines = [ln for ln in o.stderr.strip().splitlines() if not ln.startswith("warning: ")]
    if case.code == 2:
        assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), o.stderr
        for n in case.needles:
            assert n in lines[0], (n, o.stderr)
    else:
        assert any(all(n in ln for n in case.needles) for ln in (o.stdout + o.stderr).splitlines()), o.stdout
    created = {k: v for k, v in o.after.items() if k not in o.before or o.before[k] != v}
    created = {k: v for k, v in created.items() if not any(k == w or k.startswith(w + "/") for w in case.may_write)}
    removed = set(o.before) - set(o.after)
    assert not created and not removed, f"the working folder changed: +{sorted(created)} -{sorted(removed)}"
    assert not o.left, f"left in its own /tmp or /run/vmharness: {o.left}"
