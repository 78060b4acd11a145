"""`make test`: the whole suite as two pytest processes side by side, because on the 2-core CI machine
most of its time is spent in two kinds of work that each leave a CPU idle:

- **rig**: first the unit modules that keep to fake roots and a temporary folder of their own (see
  `shares_state`), while the host stream runs the others; then the tests that boot the nested-VM rig
  (tests/rig, the `l1` fixture) and run the harness inside it, L2 guests among them. L1
  has four vCPUs but, while an L2 or the harness runs in it, mostly keeps one busy. Then the linters.
- **host**: everything that changes this machine, one at a time as before: the unit modules that use
  this machine's /run/vmharness and /tmp (and two of their own, for balance: BESIDE_HOST), and the
  integration tests on this machine (libvirt guests
  under TCG, nginx, wrk and oha: one harness at a time changes a host, and the libvirtd they start is
  theirs). The host stream ended a clean clone's run 15 minutes after the rig's; without the unit
  modules it no longer runs, the suite took 63.6 min against 65.2 (docs/testing.md): the two cores
  are busy nearly all the time, so work moved between the streams changes little.

Run one after the other they took 49 minutes here; side by side, 35 (docs/testing.md); the goal is
under 25 for the whole `.ci/run` (issue 39).

What the two share is set up first, once, so that they do not race for it: the guest image (two
concurrent builds would each build it; `image build` also takes a lock), the harness's ssh key, and
what an earlier, killed session left in the host's journal (given back by `host-restore`, which must
not run while the host stream measures). Tests that time what they measure (the open-loop rate held
within 2%, a throttled client's peak against its capacity) take the rig's lock exclusively (`quiet_machine`),
so they wait until the rig's tests are done instead of measuring a shared CPU. Whatever takes it can
add its whole time to the suite's, so the built-in experiment and the attribution study, the longest,
do not: what they assert holds beside the rig, or their run says first why it could not
(tests/integration/test_experiment.py, test_study.py). The project's CI ran the host stream into its
deadline with the study waiting there (docs/testing.md).

    python -m tests.streams [PYTEST ARGS...]     # the extra arguments go to every pytest
    python -m tests.streams --check [PYTEST ARGS...]     # `make check`: the unit tier and the linters

Each stream's output is printed as it comes, each line headed by the stream's name, and kept in
.cache/test-streams/, beside each pytest's JUnit XML (every test's time). The launcher's last lines are
what the project's CI keeps of a run: the slowest tests of both streams, each stream's counts, the tests
that did not pass and where a deadline interrupted one (tests/streams_summary.py); past the deadline no
stream starts another pytest. A deadline (VMHARNESS_TEST_DEADLINE minutes, 85 by default: CI allows 90 for
everything; its set-up took a minute at ff7cc6a, whose streams it stopped at 82, and a pytest that
does not stop within STOP_GRACE seconds of Ctrl-C is killed) interrupts what still runs as Ctrl-C
would, so pytest tears its fixtures down and prints its summary; pytest itself dumps every thread's stack when
one test runs longer than `faulthandler_timeout` (pyproject.toml). The exit code is the first failing
stream's (0 when all passed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests import stream_cpu, stream_stop, streams_summary
from tests.rig.paths import REPO
from vmharness import signals

LOGS = REPO / ".cache" / "test-streams"
# each test's CPU; a stop that a test's in-process command took as its own still heard
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.stream_cpu", "-p", "tests.stream_stop"]
RIG_TESTS = [[*PYTEST, "tests/integration", "-m", "rig"], [*PYTEST, "tests/test_lint.py"]]
# The unit tier, then the host's integration tests, the longest first; last, those that need the
# machine to themselves (quiet_machine: the timed load), where they wait for the rig least.
HOST_FIRST = ("test_experiment.py", "test_study.py", "test_kill.py", "test_guest.py")
HOST_LAST = ("test_load.py",)
ENV = {"VMHARNESS_TEST_STREAMS": "1"}  # tests/integration/conftest.py: the set-up below is done

# `make check` (`--check`): the unit tier and the linters as three pytests side by side, no VM and no
# set-up. The modules that run the harness's commands against this machine's own /run/vmharness and
# /tmp run one after another in one of them, beside the linters: two at once would each see the
# other's files (seen while trying: a refused `bench --resume` found the host's lock held by a
# neighbour's command). The rest use fake roots and a temporary folder of their own
# (tests/unit/conftest.py's `_own_tmpdir`); the hostile tables' commands, a /tmp and a /run/vmharness
# of their own each (tests/own_mounts.py).
# (the tables whose modules also resume a bench on this host, `bench --resume` taking its lock, among them)
SHARED_STATE = ("test_golden_cli", "test_hostile_records", "test_hostile_runs", "test_hostile_values_real",
                "test_hoststate", "test_journal", "test_libvirt_hugetlbfs", "test_owned", "test_ownership",
                "test_plan", "test_prepared_path", "test_profile_points", "test_reader", "test_server_commands",
                "test_stopping_children")


def shares_state(module: str) -> bool:
    """Whether a unit test module (its file's stem) uses this machine's /run/vmharness or /tmp itself."""
    return module in SHARED_STATE


# and with them some of the others, so that the three take about as long. Three, not two, on two
# cores: the unit tier waits as well as computes (the rig agent's timeouts, QEMU's -version, the
# children it stops), and a third pytest computes in those waits. On a quiet machine on 2026-12-02,
# two streams took 3.3 min with 24% of the two cores idle; three, as measured there, take about
# 130 s of tests each (docs/testing.md).
BESIDE_SHARED = ("test_damaged_trees", "test_budget", "test_coverage_ratios")  # a module's name, or its start


def unit_modules(beside: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """The unit modules' files: those that share this machine's state (with those whose names start
    with one of `beside` among them), and the rest."""
    names = sorted(p.stem for p in (REPO / "tests" / "unit").glob("test_*.py"))
    shared = [f"tests/unit/{n}.py" for n in names if shares_state(n) or n.startswith(beside)]
    return shared, [f"tests/unit/{n}.py" for n in names if f"tests/unit/{n}.py" not in shared]


def check_streams() -> dict[str, list[list[str]]]:
    """The shared-state modules with the linters; the rest dealt in turn, by name, to two more."""
    shared, rest = unit_modules(BESIDE_SHARED)
    return {"shared": [[*PYTEST, *shared, "tests/test_lint.py"]], "unit-a": [[*PYTEST, *rest[0::2]]],
            "unit-b": [[*PYTEST, *rest[1::2]]]}


# `make test`: two unit modules of their own (fake roots, folders of their own) in the host's stream too,
# for balance. With the host's stream cut by its Slurm campaigns' second count, the rig's stream ended
# the suite: a clean clone of 3bee0a7 had its host's stream ready for the timed load at 23.4 test-min
# and the rig's ending at 23.9, for which the load waited (docs/testing.md). These two took 34 s there.
BESIDE_HOST = ("test_damaged_trees", "test_hostile_forms")


def suite_streams() -> dict[str, list[list[str]]]:
    """`make test`: the rig's stream starts with the unit modules of their own, the host's with the others
    (and BESIDE_HOST)."""
    shared, rest = unit_modules(BESIDE_HOST)
    return {"rig": [[*PYTEST, *rest], *RIG_TESTS], "host": [[*PYTEST, *host_args(shared)]]}


def host_args(unit: list[str]) -> list[str]:
    names = sorted(p.name for p in (REPO / "tests" / "integration").glob("test_*.py"))
    middle = [n for n in names if n not in HOST_FIRST + HOST_LAST]
    return [*unit, *(f"tests/integration/{n}" for n in (*HOST_FIRST, *middle, *HOST_LAST) if n in names),
            "-m", "not rig"]


def set_up() -> None:
    """What both streams use, made once: leftovers given back, the image built, the ssh key made, and the
    package's bytecode written beside it (as the rig does for L1, tests/rig/rig.py): where the environment
    says PYTHONDONTWRITEBYTECODE, as CI's does, each command the host's tests start compiled the harness
    again until the rig's stream, now after the unit modules, booted L1."""
    from tests.integration.conftest import give_back_leftovers
    from tests.rig.l0_trees import compile_package
    from vmharness.guest import ssh

    compile_package()
    give_back_leftovers()
    subprocess.run([sys.executable, "-m", "vmharness.cli", "image", "build"], check=True, cwd=REPO)
    ssh.harness_key()


def stream(name: str, commands: list[list[str]], extra: list[str], codes: dict[str, int],
           env: dict[str, str] | None = None) -> None:
    """The stream's commands one after the other, each line of their output printed as it comes and
    kept in its log; the first non-zero exit code (or 0) into `codes`. `env`: what it adds to the
    environment (the stream's CPU group, tests/stream_cpu.py)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    code = 0
    with (LOGS / f"{name}.log").open("wb") as log:
        for i, cmd in enumerate(commands):
            if STOPPING.is_set():  # past the deadline: the summary's lines stay the output's last
                break
            # every test's time, not only the slowest 25 the log prints: where the next minutes are
            junit = LOGS / f"{name}-{i}.xml"
            junit.unlink(missing_ok=True)  # an earlier run's, where this one's pytest writes none
            JUNITS.setdefault(name, []).append(junit)
            cmd = [*cmd, f"--junitxml={junit}"]
            # SIGINT at its default in the child: a launcher started in the background by a shell script
            # (CI) has it ignored, children inherit that, and the deadline's SIGINT would do nothing
            p = subprocess.Popen(["env", "--default-signal=INT", *cmd, *extra], cwd=REPO, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT,
                                 env={**os.environ, **ENV, stream_stop.MARK: str(LOGS / STOP_MARK), **(env or {})})
            CHILDREN.append(p)
            if STOPPING.is_set():  # started as stop_children went through CHILDREN
                p.send_signal(signal.SIGINT)
            assert p.stdout is not None
            for line in p.stdout:
                log.write(line)
                log.flush()
                with PRINTING:
                    sys.stdout.write(f"[{name}] {line.decode(errors='replace')}")
                    sys.stdout.flush()
            code = code or p.wait()
    codes[name] = code


STOP_MARK = "stopping"  # in LOGS, made before the SIGINT: tests/stream_stop.py
STOP_GRACE = 60  # seconds a pytest has to tear down after the deadline's Ctrl-C (the rig's QEMU quits in a few)
CHILDREN: list[subprocess.Popen[bytes]] = []  # the pytests started, stopped with the launcher
PRINTING = threading.Lock()  # one stream's line at a time
STOPPING = threading.Event()  # set at the deadline: no stream starts another pytest
JUNITS: dict[str, list[Path]] = {}  # each stream's pytests' JUnit XML, in the order they started


def deadline_minutes() -> float:
    raw = os.environ.get("VMHARNESS_TEST_DEADLINE", "85")
    try:
        minutes = float(raw)
    except ValueError:
        minutes = -1.0
    if not 0 < minutes < 24 * 60:
        print(f"error: VMHARNESS_TEST_DEADLINE {raw!r} is not a number of minutes from 1 to 1439 (hint: 85)",
              file=sys.stderr)
        raise SystemExit(2)
    return minutes


def main(extra: list[str]) -> int:
    began = time.monotonic()
    deadline = began + 60 * deadline_minutes()
    if extra[:1] == ["--check"]:
        extra, streams = extra[1:], check_streams()
    else:
        set_up()
        streams = suite_streams()
    codes: dict[str, int] = {}
    (LOGS / STOP_MARK).unlink(missing_ok=True)  # an earlier launcher's
    groups = {name: stream_cpu.make(name) for name in streams}
    envs = {name: {stream_cpu.GROUP: str(group)} if group else {} for name, (group, _) in groups.items()}
    threads = {name: threading.Thread(target=stream, args=(name, commands, extra, codes, envs[name]), daemon=True)
               for name, commands in streams.items()}
    for t in threads.values():
        t.start()
    watch(threads, codes, began, deadline)
    for t in threads.values():
        t.join(timeout=30)  # the last lines of an interrupted pytest: what it was doing, its summary
    notes = [stream_cpu.remove(g) if g else f"CPU per test not measured: {why}" for g, why in groups.values()]
    print("", *streams_summary.lines(JUNITS, {name: LOGS / f"{name}.log" for name in streams}),
          *dict.fromkeys(n for n in notes if n), sep="\n")
    print(f"\n===== all streams: {codes} in {(time.monotonic() - began) / 60:.1f} min =====")
    return next((c for c in codes.values() if c != 0), 0) if len(codes) == len(threads) else 1


def watch(threads: dict[str, threading.Thread], codes: dict[str, int], began: float, deadline: float) -> None:
    """`wait`, then the pytests stopped however it ends: by the deadline, or by a signal that ends a process
    (the harness's own handling, vmharness.signals: the first unwinds as Ctrl-C does, any after it while
    the pytests stop is only noted), then raised as SystemExit(128 + N). Killed by SIGTERM before, the
    launcher died at once and left its host stream's pytest running, with its libvirtd and its guests
    (seen on 2026-12-03)."""
    try:
        with signals.terminate_as_interrupt():
            try:
                wait(threads, codes, began, deadline)
            finally:
                stop_children()
    except signals.Interrupted as exc:
        raise SystemExit(128 + exc.signum) from None


def stop_children() -> None:
    STOPPING.set()
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / STOP_MARK).touch()  # before the SIGINT, which a test's in-process command may take as its own
    for p in CHILDREN:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)  # as Ctrl-C: pytest tears its fixtures down (the rig's QEMU)
    for p in CHILDREN:
        try:
            p.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            p.kill()


def wait(threads: dict[str, threading.Thread], codes: dict[str, int], began: float, deadline: float) -> None:
    """Until every stream has ended, or the deadline."""
    running = dict(threads)
    while running:
        for name, t in list(running.items()):
            if not t.is_alive():
                del running[name]
                with PRINTING:
                    print(f"\n===== stream {name}: exit {codes.get(name)} after "
                          f"{(time.monotonic() - began) / 60:.1f} min =====", flush=True)
        if running and time.monotonic() > deadline:
            with PRINTING:
                print(f"\n===== deadline: {', '.join(running)} still running after "
                      f"{(time.monotonic() - began) / 60:.1f} min; interrupting =====", flush=True)
            return
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
