"""The harness killed at every step of `bench` and `run`: SIGTERM (it must give everything back by
itself), or SIGKILL (it cannot: the journal must hold all it took). After SIGKILL the next command
works, reclaiming what the dead run left, and after `host-restore` the host is exactly as it was: no
journal, no vmh-r* domain, no nginx, wrk or QEMU the harness started, the same /tmp/vmharness*
entries, mounts, hugepages and tuned values. After SIGTERM that must hold at once, so the next command
is run only after SIGKILL, where it has a dead run's leftovers to reclaim.

The steps are found from the harness's own progress lines on stderr. To stay within the budget on a
2-core TCG machine, `run` is killed with SIGTERM at some steps and SIGKILL at the others (each step
once), with the smallest experiment: one instance, one connection count, one iteration, 1 s; after
SIGKILL, one run's next command is another run (RUN_STEPS), the others' host-restore alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_experiment import FIGURES_OFF
from tests.rig import leftovers
from vmharness.system import proc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOURNAL = Path("/run/vmharness/journal.jsonl")
KNOBS = ("/proc/sys/net/core/somaxconn", "/proc/sys/net/ipv4/tcp_tw_reuse", "/proc/sys/net/ipv4/ip_local_port_range",
         "/sys/kernel/mm/transparent_hugepage/enabled")
PROFILE = '[sysctl]\n"net.core.somaxconn" = 3333\n"net.ipv4.tcp_tw_reuse" = 1\n'


def _procs() -> set[tuple[int, str]]:
    """nginx, wrk and QEMU processes now (pid, command), but the rig's: its L1, which the rig stream's
    pytest boots and stops beside this one (tests/streams.py), runs with its temp folder on its command
    line (tests/rig/leftovers.py)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                comm = (d / "comm").read_text().strip()
                state = (d / "stat").read_text().rpartition(")")[2].split()[0]
                rigs = leftovers.PREFIX.encode() in (d / "cmdline").read_bytes()
            except (OSError, IndexError):
                continue
            if state in ("Z", "X") or rigs:  # exited, waiting for a reaper (PID 1 here reaps slowly): not running
                continue
            if comm in ("nginx", "wrk") or comm.startswith("qemu-system"):
                out.add((int(d.name), comm))
    return out


def fingerprint() -> dict[str, object]:
    domains = proc.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], timeout=30, check=False)
    hugepages = {str(p): p.read_text() for p in Path("/sys/kernel/mm/hugepages").glob("*/nr_hugepages")}
    return {
        "journal": JOURNAL.exists(),
        "domains": sorted(n for n in domains.stdout.split() if n.startswith("vmh-")),
        "processes": sorted(_procs()),
        "tmp": sorted(p.name for p in Path("/tmp").iterdir()
                      if p.name.startswith("vmharness") and not p.name.startswith(leftovers.PREFIX)),
        "mounts": Path("/proc/mounts").read_text(),
        "hugepages": hugepages,
        "knobs": {k: Path(k).read_text() for k in KNOBS},
    }


def vmh(*args: str, timeout: float = 900) -> proc.Result:
    return proc.run([sys.executable, "-m", "vmharness.cli", *args], timeout=timeout, check=False)


def kill_at(argv: list[str], marker: str, sig: signal.Signals, timeout: float = 600) -> str:
    """Start the harness, wait for `marker` in its progress (stderr), send `sig`; its stderr."""
    p = subprocess.Popen([sys.executable, "-m", "vmharness.cli", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for line in p.stderr:
            seen.append(line)
            if marker in line:
                p.send_signal(sig)
                break
            assert time.monotonic() < deadline, "".join(seen[-20:])
        else:
            pytest.fail(f"{marker!r} never came; the harness said:\n{''.join(seen[-30:])}")
        rest = p.communicate(timeout=300)[1]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    said = "".join(seen) + rest
    if sig != signal.SIGKILL:  # it unwinds: the first signal's status, whatever came after
        assert p.returncode == 128 + sig and "Traceback" not in said, (p.returncode, said[-3000:])
    return said



@pytest.fixture()
def pristine(daemon: None) -> Iterator[dict[str, object]]:
    before = fingerprint()
    assert not before["journal"], "a journal from an earlier test is here"
    yield before
    vmh("host-restore")


def _after_the_kill(before: dict[str, object], sig: signal.Signals, next_argv: list[str] | None, said: str) -> str:
    """After SIGTERM the host is as it was at once; after SIGKILL the next command (`next_argv`, where
    given) works, reclaiming what the dead one left, and then host-restore leaves the host as it was.
    (After SIGTERM the next command would start from the host as it was, which every other test does:
    its boot is not run again.) What the next command said."""
    if sig != signal.SIGKILL:  # it gave everything back itself
        assert fingerprint() == before, said[-3000:] + (JOURNAL.read_text() if JOURNAL.exists() else "")
        return ""
    next_said = ""
    if next_argv is not None:
        res = vmh(*next_argv)
        assert res.returncode == 0, res.stderr[-3000:]
        next_said = res.stderr
    restored = vmh("host-restore")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert fingerprint() == before
    return next_said


CAPACITY_STEP = "measuring what it generates"
BENCH_STEPS = ("run directory:", "tuned ", "points to measure", CAPACITY_STEP, "[1/2] baseline")


@pytest.mark.parametrize("step", BENCH_STEPS)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_bench_killed_at_each_step_leaves_nothing_behind(pristine: dict[str, object], tmp_path: Path, step: str,
                                                         sig: signal.Signals) -> None:
    (tmp_path / "p.toml").write_text(PROFILE)
    cfg = tmp_path / "bench.toml"
    cfg.write_text('[server]\nlisten = "127.0.0.1:18291"\nurl = "http://127.0.0.1:18291/"\nworkers = 1\n'
                   '[[client]]\nthreads = 1\n[sweep]\nconnections = "2"\niterations = 2\nduration = 1\n'
                   'warmup = 0\nwait = 0.5\n[load]\npercents = []\n'
                   f'capacity = {1 if step == CAPACITY_STEP else 0}\n'  # only where it is killed
                   f'[tuning]\nprofile = "{tmp_path / "p.toml"}"\n')
    said = kill_at(["bench", str(cfg), "--out", str(tmp_path / "killed")], step, sig)
    _after_the_kill(pristine, sig, ["bench", str(cfg), "--out", str(tmp_path / "next")], said)


@pytest.mark.parametrize("sig", [signal.SIGQUIT, signal.SIGUSR1], ids=["SIGQUIT", "SIGUSR1"])
def test_bench_ended_by_another_signal_gives_back_too(pristine: dict[str, object], tmp_path: Path,
                                                      sig: signal.Signals) -> None:
    """SIGQUIT and SIGUSR1 once ended bench at once, its nginx left listening and its journal record live;
    every signal whose default action ends a process unwinds like SIGTERM (tests/unit/test_interrupts.py
    sends each to the program's unwinding)."""
    cfg = tmp_path / "bench.toml"
    cfg.write_text('[server]\nlisten = "127.0.0.1:18292"\nurl = "http://127.0.0.1:18292/"\nworkers = 1\n'
                   '[[client]]\nthreads = 1\n[sweep]\nconnections = "2"\niterations = 2\nduration = 1\n'
                   'warmup = 0\nwait = 0.5\n[load]\npercents = []\ncapacity = 0\n')
    said = kill_at(["bench", str(cfg), "--out", str(tmp_path / "killed")], "[1/2] baseline", sig)
    assert f"error: interrupted by {sig.name}" in said
    _after_the_kill(pristine, sig, ["bench", str(cfg), "--out", str(tmp_path / "next")], said)


# Each step of a run once, SIGTERM at some and SIGKILL at the others (the budget allows no more). After
# SIGKILL, host-restore gives back what the dead run took; a second run, which reclaims it at its start
# (the journal's same replay), follows only the kill that left the most for it to meet: the guest
# running, its link's /24 (the next run's too) and the host's tuning. After each of the other three it
# cost the host stream 20-25 s and met less (test_experiment.py's resumed run reclaims after a SIGKILL too).
NEXT_RUN = "ssh into the guest works"
RUN_STEPS = [
    ("run directory:", signal.SIGKILL),
    ("booting its guest", signal.SIGTERM),
    ("defined vmh-r", signal.SIGKILL),
    ("guest agent answers", signal.SIGTERM),
    ("ssh into the guest works", signal.SIGKILL),
    ("tuned guest", signal.SIGTERM),
    ("[1/1] one c=2", signal.SIGKILL),  # its point measured ("[1/1] one" alone is its boot's first line)
    ("shut down", signal.SIGTERM),
]


@pytest.mark.vm
@pytest.mark.parametrize(("step", "sig"), RUN_STEPS, ids=[f"{s}-{g.name}" for s, g in RUN_STEPS])
def test_run_killed_at_each_step_leaves_nothing_behind(pristine: dict[str, object], tmp_path: Path, step: str,
                                                       sig: signal.Signals) -> None:
    (tmp_path / "p.toml").write_text(PROFILE)
    cfg = tmp_path / "run.toml"
    cfg.write_text('[guest]\nvcpus = 1\nmemory = 512\ninit = "minimal"\nshutdown_grace = 5\n'
                   '[[instance]]\nname = "one"\n'
                   '[sweep]\nconnections = "2"\niterations = 1\nduration = 1\nwarmup = 0\nwait = 0\n'
                   '[load]\npercents = []\ncapacity = 0\n'
                   f'[tuning]\nprofile = "{tmp_path / "p.toml"}"\n' + FIGURES_OFF)
    killed = tmp_path / "killed"
    said = kill_at(["run", str(cfg), "--out", str(killed)], step, sig)
    if sig == signal.SIGKILL and os.path.exists(JOURNAL):
        assert "run:" in JOURNAL.read_text()  # what it took carries its owner tag
    next_run = ["run", str(cfg), "--out", str(tmp_path / "next")] if step == NEXT_RUN else None
    next_said = _after_the_kill(pristine, sig, next_run, said)
    if step == NEXT_RUN:  # it met the dead run's guest, link and tuning, and gave them back first
        assert sig == signal.SIGKILL and "that an interrupted run left" in next_said, next_said[-3000:]
