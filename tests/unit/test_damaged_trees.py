"""Randomly damaged host trees through every read-only command (issue 24): symlink loops, FIFOs, device
nodes, binary and huge files, missing files, a file where a folder was and the reverse, files no one may
read, dangling links and links out of the tree. Whatever the damage, each command ends in exit 0, 1
where its contract has one (host-check's FAIL, host-restore's problems) or 2 with one `error:` line and
one `hint:` line; never a traceback (in-process, an exception out of `main`), never a hang (an alarm per
call), and never a write into the tree (its fingerprint before and after).

The seeds are realistic trees: a rich synthetic host (tests/treedamage.py), a plain guest-like one, and
a host-snapshot of this machine when one can be taken. The damages aim where the commands read: the
paths every command resolved on the undamaged seed (root.recording()), and every entry of the tree.
The commands run in this process (`vmharness.cli.main`), so that an example costs about half a second.
Derandomized, no example database: the same examples on every run (VMH_DAMAGE_EXAMPLES=N for more). A
failure prints the seed and its damages; tests/unit/test_hostile_trees.py keeps each class it found.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests import treedamage
from tests.treedamage import DEVICES, ESCAPES, HUGE, Damage
from vmharness.cli.main import main
from vmharness.system import root as host_root

LIMIT = 20.0  # seconds a command may take on a damaged tree (each takes well under one)
EXAMPLES = int(os.environ.get("VMH_DAMAGE_EXAMPLES", "60"))
CONFIG = '[[instance]]\nname = "base"\n\n[[instance]]\nname = "pti"\ncmdline = "pti=on"\n'
# exit codes beyond 0 and 2 that a command's contract has
ALSO = {"host-check": {1}, "host-restore": {1}}


@dataclass(frozen=True)
class Seed:
    name: str
    tree: Path
    nic: str | None
    targets: tuple[str, ...]  # host paths worth damaging

    def __repr__(self) -> str:
        return f"<seed {self.name}>"


def commands(nic: str | None, out: Path, config: Path) -> list[list[str]]:
    """Every read-only command, with and without the flags that send it down other paths."""
    argv = [["host-check"], ["host-check", "--json"], ["host-groups"], ["host-groups", "--json"],
            ["host-groups", "--class", "network"], ["host-snapshot", str(out)],
            ["host-prepare", "--dry-run", "--hugepages", "64M"], ["host-restore", "--dry-run"],
            ["host-setup", "--print", "--hugepages", "64M"], ["tune", "plan"], ["tune", "plan", "--json"],
            ["tune", "show"], ["run", "--print-xml"], ["run", str(config), "--print-xml"], ["vm", "up", "--print-xml"]]
    if nic is not None:
        argv += [["host-groups", "--bdf", nic], ["host-groups", "--bdf", nic, "--json"],
                 ["host-prepare", "--dry-run", "--bdf", nic], ["host-prepare", "--dry-run", "--bdf", nic, "--force",
                                                               "--hugepages", "64M", "--json"],
                 ["host-setup", "--print", "--bdf", nic, "--hugepages", "64M", "--force"],
                 ["run", "--print-xml", "--bdf", nic], ["vm", "up", "--print-xml", "--bdf", nic, "--managed",
                                                        "--hugepages"]]
    return argv


class Hung(BaseException):
    """The alarm went off: the command blocked (BaseException: no `except Exception` may swallow it)."""


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"no answer in {seconds:g} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def call(argv: list[str], tree: Path) -> tuple[int | str, str, str]:
    """Run one command in this process: its exit code (or what went wrong instead), stdout, stderr."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    code: int | str
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with alarm(LIMIT):
                code = main([*argv, "--host-root", str(tree)])
        except Hung as exc:
            code = f"hung: {exc}"
        except BaseException as exc:  # what a traceback would have shown
            code = f"raised {type(exc).__name__}: {exc}"
    if isinstance(code, int) and time.monotonic() - start > LIMIT:
        code = f"hung: {time.monotonic() - start:.1f} s (exit {code})"
    out.flush()
    err.flush()
    return code, out.buffer.getvalue().decode(errors="replace"), err.buffer.getvalue().decode(errors="replace")


def verdict(argv: list[str], code: int | str, err: str) -> str | None:
    """What is wrong with an outcome, or None."""
    if isinstance(code, str):
        return code
    if code not in {0, 2} | ALSO.get(argv[0], set()):
        return f"exit {code}"
    if "Traceback" in err:
        return "a traceback on stderr"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    if code == 2 and (len(errors) != 1 or len(lines) < 2 or lines[-2] != errors[0]
                      or not lines[-1].startswith("hint: ")):
        return "exit 2 without exactly one error: line followed by one hint: line"
    if code != 2 and errors:
        return f"exit {code} with an error: line"
    return None


def _this_host(base: Path) -> Path | None:
    """A host-snapshot of this machine, unpacked; None where one cannot be taken."""
    out = base / "this-host.tar.gz"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if main(["host-snapshot", "--host-root", "/", str(out)]) != 0:
            return None
    tree = base / "this-host"
    tree.mkdir()
    with tarfile.open(out) as t:
        t.extractall(tree, filter="tar")
    return tree


def _first_nic(tree: Path) -> str | None:
    devices = tree / "sys/bus/pci/devices"
    found = sorted(d.name for d in devices.iterdir() if (d / "class").read_text().startswith("0x02"))
    return found[0] if found else None


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[Seed]:
    base = tmp_path_factory.mktemp("seeds")
    trees: list[tuple[str, Path, str | None]] = [("rich", base / "rich", treedamage.rich_host(base / "rich")),
             ("plain", base / "plain", treedamage.plain_host(base / "plain"))]
    here = _this_host(base)
    if here is not None:
        trees.append(("this-host", here, _first_nic(here)))
    out: list[Seed] = []
    for name, tree, nic in trees:
        cwd = base / f"{name}-cwd"
        cwd.mkdir()
        (cwd / "r.toml").write_text(CONFIG)
        with host_root.recording() as reads, contextlib.chdir(cwd):
            for argv in commands(nic, cwd / "out.tar.gz", cwd / "r.toml"):
                code, _, err = call(argv, tree)
                assert verdict(argv, code, err) is None, (name, argv, code, err)
                (cwd / "out.tar.gz").unlink(missing_ok=True)
        entries = {"/" + rel for rel in treedamage.fingerprint(tree)}
        out.append(Seed(name, tree, nic, tuple(sorted(reads | entries))))
    return out


def damages(targets: tuple[str, ...]) -> st.SearchStrategy[list[Damage]]:
    where = st.sampled_from(targets)
    plain = st.builds(Damage, st.sampled_from([k for k in treedamage.KINDS
                                               if k not in ("device", "garbage", "huge", "escaping")]), where)
    one = (plain
           | st.builds(Damage, st.just("device"), where, st.sampled_from(sorted(DEVICES)))
           | st.builds(Damage, st.just("garbage"), where, st.binary(max_size=200))
           | st.builds(Damage, st.just("huge"), where, st.sampled_from(HUGE))
           | st.builds(Damage, st.just("escaping"), where, st.sampled_from(ESCAPES)))
    return st.lists(one, min_size=1, max_size=4)


@pytest.mark.skipif(os.geteuid() != 0, reason="device nodes are made with mknod, which needs root")
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_every_read_only_command_survives_a_damaged_host_tree(seeds: list[Seed], data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(seeds), label="seed")
    wanted = data.draw(damages(seed.targets), label="damages")
    work = Path(tempfile.mkdtemp(prefix="example-", dir=seed.tree.parent))
    try:
        tree = work / "root"
        shutil.copytree(seed.tree, tree, symlinks=True)
        done = [d for d in wanted if treedamage.apply(tree, d)]
        said = f"seed {seed.name}, damages: " + "; ".join(map(str, done))
        note(said)
        (work / "cwd").mkdir()
        (work / "r.toml").write_text(CONFIG)
        before, outside = treedamage.fingerprint(tree), treedamage.outside_fingerprint()
        failures = []
        with contextlib.chdir(work / "cwd"):
            for argv in commands(seed.nic, work / "out.tar.gz", work / "r.toml"):
                code, _, err = call(argv, tree)
                wrong = verdict(argv, code, err)
                if wrong is not None:
                    failures.append(f"{' '.join(argv)}: {wrong}\n{err.strip()[-600:]}")
                (work / "out.tar.gz").unlink(missing_ok=True)
        assert not failures, said + "\n" + "\n".join(failures)
        after = treedamage.fingerprint(tree)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        assert not changed, f"{said}\nwritten into the tree: {changed}"
        assert treedamage.outside_fingerprint() == outside, said
        assert not list((work / "cwd").iterdir()), f"{said}\nwritten into the working folder"
    finally:
        for folder, _, _ in os.walk(work):  # a damage may have left a folder no one may enter
            os.chmod(folder, 0o700)
        shutil.rmtree(work, ignore_errors=True)
