"""`make test`'s launcher (tests/streams.py): each stream's lines printed as they come, headed by its
name and kept in its log; a deadline that interrupts what still runs; a bad deadline refused."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import stream_cpu, streams, streams_summary


@pytest.fixture(autouse=True)
def own_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's logs in its own folder, and its own list of children to stop."""
    monkeypatch.setattr(streams, "LOGS", tmp_path)
    monkeypatch.setattr(streams, "CHILDREN", [])
    monkeypatch.setattr(streams, "JUNITS", {})
    monkeypatch.setattr(streams, "STOPPING", threading.Event())


def test_lines_are_printed_as_they_come_headed_by_the_stream(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    codes: dict[str, int] = {}
    say = [sys.executable, "-c", "import sys; print('one'); print('two'); sys.exit(int(sys.argv[1]))"]
    streams.stream("rig", [[*say, "0"], [*say, "3"], [*say, "0"]], [], codes)
    out = capsys.readouterr().out
    assert out.splitlines() == ["[rig] one", "[rig] two"] * 3
    assert (tmp_path / "rig.log").read_text() == "one\ntwo\n" * 3
    assert codes == {"rig": 3}  # the first failing command's code, though the last passed


def test_the_deadline_interrupts_what_still_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The child is interrupted only once it has said it started (its line is in the stream's log),
    however long a loaded machine takes to start a Python; then its deadline is already past."""
    codes: dict[str, int] = {}
    sleeper = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    t = threading.Thread(target=streams.stream, args=("host", [sleeper], [], codes), daemon=True)
    # as when CI's shell starts the launcher in the background: SIGINT ignored, and inherited by children
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    t.start()
    began = time.monotonic()
    log = tmp_path / "host.log"
    try:
        while not (log.exists() and log.read_bytes() == b"started\n"):
            assert t.is_alive() and time.monotonic() - began < 60, "the child never said it started"
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, before)  # the child runs: it has what it inherited
    streams.wait({"host": t}, codes, began, deadline=began)
    streams.stop_children()
    t.join(timeout=30)
    assert not t.is_alive()
    out = capsys.readouterr().out
    assert "===== deadline: host still running after" in out and "[host] started" in out
    # Interrupted by the SIGINT (Python ends by it again), not waited out (0, a minute later).
    assert codes["host"] == -signal.SIGINT


def test_a_launcher_ended_by_sigterm_stops_its_pytests_first(tmp_path: Path) -> None:
    """SIGTERM while the streams run: the launcher's child is interrupted, not left running."""
    codes: dict[str, int] = {}
    sleeper = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    t = threading.Thread(target=streams.stream, args=("host", [sleeper], [], codes), daemon=True)
    t.start()
    log = tmp_path / "host.log"
    began = time.monotonic()
    while not (log.exists() and log.read_bytes() == b"started\n"):
        assert t.is_alive() and time.monotonic() - began < 60, "the child never said it started"
        time.sleep(0.05)
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(SystemExit) as ended:
        streams.watch({"host": t}, codes, began, deadline=began + 600)
    assert ended.value.code == 128 + signal.SIGTERM
    t.join(timeout=30)
    assert not t.is_alive() and codes["host"] == -signal.SIGINT  # interrupted as by Ctrl-C, not left running
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler given back


SWALLOWS = """
import pathlib, signal, time
import pytest

@pytest.fixture(autouse=True)
def swallowed():
    # as the harness's command run in-process takes a SIGINT that comes while it runs as its own
    signal.signal(signal.SIGINT, lambda *_: None)

@pytest.mark.parametrize("n", range(16))
def test_one(n):
    pathlib.Path(STARTED).touch()
    time.sleep(0.25)
"""


def test_a_pytest_whose_test_took_the_sigint_as_its_own_still_stops_after_that_test(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's stop reaches a pytest whose tests take SIGINT for themselves (the unit tier's
    in-process commands do): it ends after the test it is in, its summary saying why. The control, the same
    pytest without the plugin, runs all sixteen to their end (its grace here outlasts them)."""
    monkeypatch.setattr(streams, "STOP_GRACE", 30)
    started = tmp_path / "started"
    module = tmp_path / "cases" / "test_swallows.py"
    module.parent.mkdir()
    module.write_text(f"STARTED = {str(started)!r}\n" + SWALLOWS)
    for plugin, ends in ((["-p", "tests.stream_stop"], 2), ([], 0)):
        started.unlink(missing_ok=True)
        codes: dict[str, int] = {}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, str(module)]
        t = threading.Thread(target=streams.stream, args=("rig", [cmd], [], codes), daemon=True)
        t.start()
        began = time.monotonic()
        while not started.exists():
            assert t.is_alive() and time.monotonic() - began < 60, "the child never started a test"
            time.sleep(0.05)
        stopping = time.monotonic()
        streams.stop_children()
        t.join(timeout=60)
        assert not t.is_alive() and codes["rig"] == ends
        log = (tmp_path / "rig.log").read_text()
        if ends == 2:  # pytest's own exit for an interrupted session, within a test or two
            assert time.monotonic() - stopping < 10 and "Interrupted: the test launcher is stopping" in log, log
            assert "16 passed" not in log, log
        else:
            assert "16 passed" in log and "Interrupted" not in log, log
        (tmp_path / streams.STOP_MARK).unlink()
        monkeypatch.setattr(streams, "CHILDREN", [])
        monkeypatch.setattr(streams, "STOPPING", threading.Event())


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "1e9", "nan"])
def test_a_bad_deadline_is_one_line(raw: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VMHARNESS_TEST_DEADLINE", raw)
    with pytest.raises(SystemExit) as stop:
        streams.deadline_minutes()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: VMHARNESS_TEST_DEADLINE") and err.count("\n") == 1


def test_check_runs_every_unit_module_once_and_the_shared_state_ones_together() -> None:
    streams_ = streams.check_streams()
    files = [a for cmds in streams_.values() for cmd in cmds for a in cmd if a.startswith("tests/")]
    unit = sorted(f"tests/unit/{p.name}" for p in (Path(streams.__file__).parent / "unit").glob("test_*.py"))
    assert sorted(f for f in files if f.startswith("tests/unit/")) == unit  # each once
    (shared,) = streams_["shared"]
    assert all(f in shared for f in unit if streams.shares_state(f.rsplit("/", 1)[1][:-3]))
    assert "tests/unit/test_journal.py" in shared and "tests/test_lint.py" in shared
    assert "tests/unit/test_damaged_trees.py" in shared  # beside them, for balance
    (a,), (b,) = streams_["unit-a"], streams_["unit-b"]
    assert not any(streams.shares_state(Path(f).stem) for f in a + b if f.startswith("tests/unit/"))
    assert abs(len(a) - len(b)) <= 1
    assert all(name in [f.rsplit("/", 1)[1][:-3] for f in unit] for name in streams.SHARED_STATE)


def test_the_suite_runs_every_unit_module_once_those_sharing_state_in_the_host_stream() -> None:
    """The rig's stream takes the unit modules of their own before it boots L1; the host's stream runs
    those that use this machine's /run/vmharness and /tmp, and two of their own for balance."""
    suite = streams.suite_streams()
    (host,) = suite["host"]
    unit_rig, rig, lint = suite["rig"]
    unit = sorted(f"tests/unit/{p.name}" for p in (Path(streams.__file__).parent / "unit").glob("test_*.py"))
    assert sorted(f for cmd in (host, unit_rig) for f in cmd if f.startswith("tests/unit/")) == unit
    beside = [f for f in unit if Path(f).stem in streams.BESIDE_HOST]
    assert len(beside) == len(streams.BESIDE_HOST) and all(f in host for f in beside)  # for balance
    assert all(streams.shares_state(Path(f).stem) == (f in host) for f in unit if f not in beside)
    assert "tests/unit/test_journal.py" in host and "tests/unit/test_coverage.py" in unit_rig
    assert "tests/unit/test_hostile_qemu.py" in unit_rig  # its commands' /tmp and /run/vmharness are their own
    assert rig[-3:] == ["tests/integration", "-m", "rig"] and lint[-1] == "tests/test_lint.py"
    integration = [f for f in host if f.startswith("tests/integration/")]
    assert integration[0].endswith(streams.HOST_FIRST[0]) and integration[-1].endswith(streams.HOST_LAST[-1])
    assert host.index(integration[0]) > max(host.index(f) for f in host if f.startswith("tests/unit/"))


SOME_TESTS = """
import time, pytest

def test_slow():
    time.sleep(0.5)

def test_fails():
    assert 1 == 2

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

def test_waits():
    print("waiting", flush=True)
    time.sleep(60)
"""


def test_the_summary_names_the_slowest_tests_what_failed_and_where_the_deadline_stopped_a_stream(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real pytest, stopped at the deadline inside its last test: the summary that ends the launcher's
    output names the slowest test first, the failed one, and the line the Ctrl-C found; the stream's
    next pytest is not started (its lines would push the summary out of the tail CI keeps)."""
    tests = tmp_path / "test_some.py"
    tests.write_text(SOME_TESTS)
    codes: dict[str, int] = {}
    pytest_ = [sys.executable, "-m", "pytest", "-v", "-s", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir",
               str(tmp_path), str(tests)]
    after = [sys.executable, "-c", "print('the next command')"]
    t = threading.Thread(target=streams.stream, args=("host", [pytest_, after], [], codes), daemon=True)
    t.start()
    began = time.monotonic()
    log = tmp_path / "host.log"
    while b"waiting\n" not in (log.read_bytes() if log.exists() else b""):  # from inside test_waits
        assert t.is_alive() and time.monotonic() - began < 120, "pytest never reached its last test"
        time.sleep(0.05)
    streams.wait({"host": t}, codes, began, deadline=began)
    streams.stop_children()
    t.join(timeout=60)
    assert not t.is_alive()
    assert "the next command" not in capsys.readouterr().out
    lines = streams_summary.lines(streams.JUNITS, {"host": log})
    print(*lines, sep="\n")
    slowest = lines[1].split()  # wall, then CPU: not measured by this pytest (no tests.stream_cpu)
    assert float(slowest[0]) >= 0.5 and slowest[1:] == ["-", "host", "test_some::test_slow"], lines
    assert "host: 1 passed, 1 failure, 1 skipped in " in lines[4], lines
    failed = lines.index("not passed: host test_some::test_fails (failure)")
    line = SOME_TESTS.splitlines().index("    assert 1 == 2") + 1
    assert lines[failed + 1].startswith("    ") and lines[failed + 1].endswith(  # pytest may write it relative
        f"{tests.name}:{line}: assert 1 == 2"), lines[failed + 1]
    (where,) = [line for line in lines if line.startswith("interrupted: ")]
    line = int(where.rsplit(":", 1)[1])
    assert where.startswith(f"interrupted: host at {tests}:") and "time.sleep(60)" in \
        SOME_TESTS.splitlines()[line - 1], where


def test_a_summary_of_no_pytest_at_all_is_empty_not_an_error(tmp_path: Path) -> None:
    lines = streams_summary.lines({"rig": [tmp_path / "never-written.xml"]}, {"rig": tmp_path / "no.log"})
    assert lines == ["===== the 0 slowest tests (s of wall, then of their stream's CPU; set-up and teardown "
                     "included) =====", "===== rig: 0 passed in 0.0 test-min ====="]


def test_a_ctrl_c_caught_outside_the_test_names_the_test_file_too(tmp_path: Path) -> None:
    """In a clean clone's host stream the Ctrl-C's last frame was the standard library's selectors.py
    (a test waiting on its command), printed twice: said once, with the file pytest was in."""
    log = tmp_path / "host.log"
    stopped = "/usr/lib/python3.11/selectors.py:415: KeyboardInterrupt\n"
    log.write_text("tests/integration/test_guest.py .........F                               [ 96%]\n"
                   "tests/integration/test_bench.py ....\n" + stopped * 2)
    assert streams_summary.interrupted_at(log) == [
        "/usr/lib/python3.11/selectors.py:415 (in tests/integration/test_bench.py)"]
    log.write_text("tests/integration/test_bench.py ....\ntests/integration/test_bench.py:12: KeyboardInterrupt\n")
    assert streams_summary.interrupted_at(log) == ["tests/integration/test_bench.py:12"]


BUSY_AND_IDLE = """
import time

def test_busy():
    end = time.process_time() + 1.0
    while time.process_time() < end:
        pass

def test_idle():
    time.sleep(1.0)
"""


def test_each_test_has_the_cpu_its_stream_used_beside_its_wall_time(tmp_path: Path) -> None:
    """A real pytest in a stream's control group: a test that computes for a second of CPU is credited
    about that, one that sleeps as long next to nothing, and the stream's line sums them."""
    group, why = stream_cpu.make("unit")
    if group is None:
        pytest.skip(f"CPU per test cannot be measured here: {why}")
    tests = tmp_path / "test_cpu.py"
    tests.write_text(BUSY_AND_IDLE)
    codes: dict[str, int] = {}
    pytest_ = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.stream_cpu",
               "-o", "addopts=", "--rootdir", str(tmp_path), str(tests)]
    try:
        streams.stream("host", [pytest_], [], codes, env={stream_cpu.GROUP: str(group)})
    finally:
        assert stream_cpu.remove(group) == ""  # the pytest has ended: nothing is left in it
    assert codes == {"host": 0}
    got = {c.name: c for c in streams_summary.cases("host", streams.JUNITS["host"][0])}
    busy, idle = got["test_cpu::test_busy"], got["test_cpu::test_idle"]
    assert busy.cpu is not None and 0.9 <= busy.cpu <= busy.seconds + 0.5, busy
    assert idle.cpu is not None and idle.cpu < 0.3 and idle.seconds >= 1.0, idle
    lines = streams_summary.lines(streams.JUNITS, {"host": tmp_path / "host.log"})
    assert lines[1].split()[2:] == ["host", "test_cpu::test_busy"] or lines[2].split()[2:] == [
        "host", "test_cpu::test_busy"], lines
    assert lines[3].startswith("===== host: 2 passed in ") and " CPU-min) =====" in lines[3], lines
