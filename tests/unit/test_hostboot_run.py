"""`vmharness run` with host boots (experiment/hostrun.py, hostboots/bootunit.py) against a fake host, a
fake kexec and a fake systemd root (tests/hostboot_kit.py: a tree laid out like /, with
/run/systemd/system and /etc/systemd/system in it). Nothing here runs kexec or systemctl: the tree is
not the live host, so the unit's daemon-reload is never called, and the kexec is the kit's.

What holds: consent before anything (refused without the flag, naming what a reboot ends; a resumed
run's consent is its state file); each host boot measures its own instances of its round alone; what
the run took is given back before the load; the unit that resumes the run is installed and journaled
before the first switch, journaled again after each boot, and removed at the end; host-restore removes
it, journaled or left over; the unit's text holds no value it did not check."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from tests import hostboot_kit
from tests.hostboot_kit import HOME_RELEASE, BootingHost, FakeKexec
from vmharness.bench import bench
from vmharness.bench import plan as bench_plan
from vmharness.cli import main as cli
from vmharness.errors import HarnessError
from vmharness.experiment import hostrun, ops, runfolder, runner
from vmharness.experiment.boots import Session
from vmharness.experiment.hostboots import bootunit, plan
from vmharness.experiment.hostboots.state import Store
from vmharness.host.inspect.net import ssh_route
from vmharness.journal import journal
from vmharness.journal.kinds import OpKind
from vmharness.model import config
from vmharness.rundir.store import RunDir

TOML = ('[guest]\naccel = "tcg"\n[sweep]\niterations = 2\n[[host_boot]]\nname = "v2off"\n'
        'kernel = "/boot/vmlinuz-x"\ncmdline = "spectre_v2=off"\n[[instance]]\nname = "a"\n'
        '[[instance]]\nname = "b"\nhost_boot = "v2off"\n[[instance]]\nname = "c"\n')


class World:
    def __init__(self, tmp: Path, systemd: bool = True) -> None:
        (tmp / "c.toml").write_text(TOML)
        self.cfg = config.load_run(tmp / "c.toml")
        (tmp / "host").mkdir()
        self.host = BootingHost(tmp / "host")
        if systemd:
            (self.host.base / "run/systemd/system").mkdir(parents=True)
        targets, releases = hostboot_kit.targets(hostboot_kit.trusted(f"hostrun-{tmp.name}"))
        self.ready = hostrun.Prepared("/usr/sbin/kexec", targets())
        self.kexec = FakeKexec(self.host, releases)
        self.kexec.tick = self._tick
        self.run = runfolder.new_run(self.cfg, tmp / "run", {})
        self.said: list[str] = []
        self.events: list[str] = []
        self.measured: list[tuple[int, str, tuple[str, ...], str]] = []

    @property
    def unit(self) -> Path:
        return self.host.base / bootunit.UNIT.lstrip("/")

    def outstanding(self, op: str) -> list[journal.Record]:
        return [r for r in journal.outstanding(journal.read(self.host.root)) if r["op"] == op]

    def _tick(self, what: str) -> None:
        self.events.append(what)
        if what == "execute":  # the switch: the unit that resumes the run is there, and journaled
            assert bootunit.installed(self.host.root) and self.outstanding(OpKind.BOOT_UNIT)
            assert (self.host.base / bootunit.LINK.lstrip("/")).is_symlink()

    def measure(self, stop: plan.Stop) -> None:
        self.events.append("measure")
        self.measured.append((stop.round, stop.boot, stop.instances, self.host.release))
        # what a stop takes: a record of the run's own, which must be given back before the switch
        journal.record(self.host.root, {"op": OpKind.KEXEC, "boot": "x", "kernel": "/boot/x"}, bench.owner(self.run))

    def go(self, ready: hostrun.Prepared | None = None) -> str:
        return hostrun.go(self.host.root, self.cfg, self.run, self.said.append, self.kexec, ready or self.ready,
                          self.measure)

    def round_trip(self) -> int:
        """Start, then after each (fake) switch the host arrives and the run is resumed as the unit would."""
        switches = 0
        outcome = self.go()
        while outcome == "switched":
            switches += 1
            self.kexec.arrive()
            assert not self.outstanding(OpKind.BOOT_UNIT)  # the boot emptied /run, where the journal is
            outcome = self.go(hostrun.Prepared(self.ready.program, None))  # the state holds the targets now
        return switches


def test_each_host_boot_measures_its_instances_and_the_unit_lives_from_the_first_switch_to_the_end(
        tmp_path: Path) -> None:
    w = World(tmp_path)
    assert w.round_trip() == plan.switches(w.cfg) == 3
    assert w.measured == [(0, "", ("a", "c"), HOME_RELEASE), (0, "v2off", ("b",), "7.3.4+deb13-amd64"),
                          (1, "v2off", ("b",), "7.3.4+deb13-amd64"), (1, "", ("c", "a"), HOME_RELEASE)]
    # each switch: what the stop took is given back (a load finds no record of the run's but its own)
    assert w.events == ["measure", "load", "execute", "measure", "load", "execute", "measure", "load", "execute",
                        "measure"]
    assert not w.unit.exists() and not os.path.lexists(w.host.base / bootunit.LINK.lstrip("/"))
    assert Store(w.host.base).load() is None and w.host.release == HOME_RELEASE


def test_a_run_whose_host_boots_came_home_is_not_gone_round_again(tmp_path: Path) -> None:
    w = World(tmp_path)
    assert not hostrun.finished(w.run)
    w.round_trip()
    measured, events = list(w.measured), list(w.events)
    again = RunDir.resume(w.run.path, "run")  # as `run --resume` reads it
    assert hostrun.finished(again)
    assert hostrun.go(w.host.root, w.cfg, again, w.said.append, w.kexec, w.ready, w.measure) == "done"
    assert (w.measured, w.events) == (measured, events)  # no switch, no stop measured again
    assert w.said[-1].startswith("the run's host boots were all gone round") and not w.unit.exists()


def test_a_stop_gives_back_what_it_took_before_the_load(tmp_path: Path) -> None:
    w = World(tmp_path)
    seen: list[list[journal.Record]] = []
    w.kexec.tick = lambda what: seen.append(w.outstanding(OpKind.KEXEC)) if what == "load" else None
    assert w.go() == "switched"
    assert [[r["boot"] for r in recs] for recs in seen] == [["v2off"]]  # the stop's own record was undone


@pytest.mark.parametrize("stop", [HarnessError("the guest image is gone"), KeyboardInterrupt()])
def test_a_run_that_stops_takes_its_unit_away_and_keeps_its_state(tmp_path: Path, stop: BaseException) -> None:
    """Killed by a signal or stopped by an error, the run is not started again by the next boot."""
    w = World(tmp_path)
    assert w.go() == "switched"
    w.kexec.arrive()

    def measure(_stop: plan.Stop) -> None:
        raise stop
    with pytest.raises(type(stop)):
        hostrun.go(w.host.root, w.cfg, w.run, w.said.append, w.kexec, hostrun.Prepared(w.ready.program, None),
                   measure)
    assert not w.unit.exists() and not w.outstanding(OpKind.BOOT_UNIT)
    assert w.said[-1].startswith(f"the run stopped; its state is kept: vmharness run --resume {w.run.path.resolve()}")
    assert Store(w.host.base).load() is not None and w.go(hostrun.Prepared(w.ready.program, None)) == "switched"
    assert w.unit.exists()  # going on installs it again


def test_without_systemd_the_run_says_what_to_run_and_installs_nothing(tmp_path: Path) -> None:
    w = World(tmp_path, systemd=False)
    w.kexec.tick = lambda _what: None
    assert w.round_trip() == 3
    assert not w.unit.exists() and not (w.host.base / "etc").exists()
    assert f"no systemd on this host: after each switch, run: vmharness run --resume {w.run.path.resolve()}" \
        in w.said


def test_the_points_of_each_stop_are_its_instances_of_its_round_and_all_are_measured_once(tmp_path: Path) -> None:
    w = World(tmp_path)
    points = bench_plan.todo(w.cfg, [], set())
    by_stop = [[p for p in points if hostrun.points_of(w.cfg, s)(p)] for s in plan.stops(w.cfg)]
    for stop, got in zip(plan.stops(w.cfg), by_stop, strict=True):
        assert got and all(p.instance in stop.instances and p.iteration == stop.round for p in got)
    assert sorted(p.key for ps in by_stop for p in ps) == sorted(p.key for p in points)


def test_the_runner_of_a_stop_boots_only_its_instances_of_its_round(tmp_path: Path) -> None:
    """The runner's own loop (its sessions faked: each records its points as failed) on each stop."""
    w = World(tmp_path)
    got = []
    for stop in plan.stops(w.cfg):
        r = runner.Runner(w.cfg, w.run, w.host.root, w.said.append, keep=hostrun.points_of(w.cfg, stop))
        sessions: list[tuple[str, int]] = []

        def fake(s: Session, _label: str, r: runner.Runner = r, sessions: list[tuple[str, int]] = sessions) -> None:
            sessions.append((s.instance, s.iteration))
            r._fail(s, "a fake session")
        r._session = fake  # type: ignore[method-assign,assignment]
        r._measure()
        got.append(sessions)
    assert got == [[("a", 0), ("c", 0)], [("b", 0)], [("b", 1)], [("c", 1), ("a", 1)]]


def _kexec_host(w: World) -> None:
    (w.host.base / "sys/kernel").mkdir(parents=True)
    (w.host.base / "sys/kernel/kexec_loaded").write_text("0\n")
    (w.host.base / "usr/sbin").mkdir(parents=True)
    (w.host.base / "usr/sbin/kexec").write_text("")


def test_consent_is_asked_before_anything_and_a_resumed_run_has_it_in_its_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(tmp_path)
    _kexec_host(w)
    (w.host.base / "run/libvirt/qemu").mkdir(parents=True)
    (w.host.base / "run/libvirt/qemu/someone-elses.xml").write_text("<domstatus/>")
    monkeypatch.setattr(ssh_route, "session", lambda _root: "192.0.2.7 50000 192.0.2.1 22")
    with pytest.raises(HarnessError, match=r"reboots the host 3 times \(kexec\), which ends the libvirt guest "
                       r"someone-elses; this SSH session \(192\.0\.2\.7") as exc:
        hostrun.preflight(w.host.root, w.cfg, False, tmp_path / "new", False, False)
    assert exc.value.hint is not None and "--allow-host-reboot" in exc.value.hint
    with pytest.raises(HarnessError, match="--keep-host"):
        hostrun.preflight(w.host.root, w.cfg, True, tmp_path / "new", False, True)
    w.kexec.tick = lambda _what: None
    assert w.go() == "switched"  # the state file is this run's now
    assert hostrun.preflight(w.host.root, w.cfg, False, w.run.path, True, False).targets is None
    with pytest.raises(HarnessError, match="reboots the host"):  # another run folder has no consent from it
        hostrun.preflight(w.host.root, w.cfg, False, tmp_path, True, False)
    with pytest.raises(HarnessError, match=f"another run's host boots are under way on this host "
                       f"\\({w.run.path.resolve()}\\)"):  # nor may it start while they are
        hostrun.preflight(w.host.root, w.cfg, True, tmp_path / "new", False, False)


@pytest.mark.parametrize(("mounts", "refused"), [
    ("/dev/vda1 / ext4 rw 0 0\ntmpfs {tmp} tmpfs rw 0 0\n", "is on a tmpfs"),
    ("/dev/vda1 / ext4 rw 0 0\nnone {parent} ramfs rw 0 0\n", "is on a ramfs"),
    ("tmpfs / tmpfs rw 0 0\n/dev/vda2 {tmp} ext4 rw 0 0\n", None),  # the longest mount point counts
    ("/dev/vda1 / ext4 rw 0 0\ntmpfs {tmp}\\040x tmpfs rw 0 0\n", None),  # "{tmp} x" is another folder
    ("tmpfs {tmp}\\134 tmpfs rw 0 0\n/dev/vda1 / ext4 rw 0 0\n", None),
])
def test_a_run_folder_a_boot_would_empty_is_refused_before_anything(tmp_path: Path, mounts: str,
                                                                    refused: str | None) -> None:
    w = World(tmp_path)
    _kexec_host(w)
    text = mounts.format(tmp=tmp_path.resolve(), parent=tmp_path.resolve().parent)
    (w.host.base / "proc/mounts").write_text(text)
    if refused is None:  # past the folder, to the host boot's files (the test's configuration names none)
        with pytest.raises(HarnessError, match=r"config\.host_boot\[0\]\.kernel /boot/vmlinuz-x: cannot be found"):
            hostrun.preflight(w.host.root, w.cfg, True, tmp_path / "new", False, False)
        return
    with pytest.raises(HarnessError, match=f"the run folder {tmp_path.resolve()}/new {refused}") as exc:
        hostrun.preflight(w.host.root, w.cfg, True, tmp_path / "new", False, False)
    assert exc.value.hint is not None and "--out" in exc.value.hint


def test_host_restore_removes_the_unit_journaled_or_left_over_and_no_one_elses(tmp_path: Path) -> None:
    w = World(tmp_path)
    root = w.host.root
    bootunit.install(root, w.run.path, tmp_path)
    assert ops.undo_all(root, lambda _: None) == [] and not w.unit.exists()
    bootunit.install(root, w.run.path, tmp_path)
    journal.clear(root)  # a boot emptied /run before the resumed run journaled it again
    assert ops.leftovers(root, dry_run=True) == [f"would remove {bootunit.UNIT}"] and w.unit.exists()
    assert ops.leftovers(root, dry_run=False) and not w.unit.exists()
    w.unit.write_text("[Unit]\nDescription=someone else's\n")
    assert ops.leftovers(root, dry_run=False) == [] and w.unit.exists()


def test_a_unit_that_is_a_link_or_no_file_is_not_taken_for_the_harnesss(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.unit.parent.mkdir(parents=True)
    (tmp_path / "target").write_text(bootunit.MARK + "\n")
    w.unit.symlink_to(tmp_path / "target")
    assert ops.leftovers(w.host.root, dry_run=False) == [] and (tmp_path / "target").exists()
    with pytest.raises(HarnessError, match="symlink or not a file"):
        bootunit.install(w.host.root, w.run.path, tmp_path)
    assert (tmp_path / "target").read_text() == bootunit.MARK + "\n" and not w.outstanding(OpKind.BOOT_UNIT)
    w.unit.unlink()
    os.mkfifo(w.unit)
    with pytest.raises(HarnessError, match=bootunit.UNIT):  # one line, never a hang on the FIFO
        ops.leftovers(w.host.root, dry_run=True)


def test_the_unit_runs_one_fixed_command_on_the_run_folder() -> None:
    text = bootunit.text(Path("/srv/runs/run-1"), Path("/srv"), "/usr/bin/python3")
    assert "ExecStart=/usr/bin/python3 -m vmharness run --resume /srv/runs/run-1\n" in text
    assert text.startswith(bootunit.MARK) and "WorkingDirectory=/srv\n" in text and "Type=simple\n" in text


@pytest.mark.parametrize("path", ["/srv/a b", "/srv/%h", "/srv/$HOME", "/srv/a'b", '/srv/a"b', "/srv/a\\b",
                                  "/srv/a\nExecStartPre=/bin/sh", "/srv/../etc", "srv/run", "/srv/a;b", "/srv/é"])
def test_a_run_folder_the_unit_could_not_name_plainly_is_refused(path: str) -> None:
    with pytest.raises(HarnessError, match=r"the run folder .* is not an absolute path of plain characters"):
        bootunit.text(Path(path), Path("/srv"), "/usr/bin/python3")


def test_run_help_names_the_consent_flag() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["run", "--help"]) == 0
    assert "--allow-host-reboot" in out.getvalue()


def _detached(w: World) -> int:
    """hostrun.detach in a child without a terminal (stdin /dev/null, stdout a pipe): what it then
    prints is the log's; returns the child's exit status."""
    r, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(wr, 1)
            os.close(wr)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - pytest's capture is not fd 1
            sys.stdin = open(0, closefd=False)  # noqa: SIM115
            hostrun.detach(w.host.root, w.run)
            print("after the switch", flush=True)
            os._exit(0)
        except BaseException:
            os._exit(3)
    os.close(wr)
    with open(r, closefd=True) as f:
        said = f.read()
    assert "follow it: tail -F " + str(w.run.path / hostrun.LOG) in said and "after the switch" not in said
    assert ("no systemd on this host" in said) is not (w.host.base / "run/systemd/system").is_dir()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_run_says_how_to_follow_it_then_writes_to_its_log_never_through_a_link(tmp_path: Path) -> None:
    w = World(tmp_path)
    assert _detached(w) == 0
    assert (w.run.path / hostrun.LOG).read_text() == "after the switch\n"
    (w.run.path / hostrun.LOG).unlink()
    (w.run.path / hostrun.LOG).symlink_to(tmp_path / "elsewhere")
    assert _detached(w) == 3 and not (tmp_path / "elsewhere").exists()
    (w.host.base / "run/systemd/system").rmdir()  # no systemd: the terminal is told what to run
    (w.run.path / hostrun.LOG).unlink()
    assert _detached(w) == 0


def test_kexec_for_real_is_made_in_one_place_and_no_test_here_can_reach_it() -> None:
    """`kexec -e` runs only in kexec.Real, made only by `run` once its preflight passed (--allow-host-reboot,
    kexec-tools installed, each kernel a root-only file). No test outside the rig makes one, a benchmark runs kexec
    only through an L1's agent, and `make deps`
    installs no kexec-tools, so on this machine and CI's the preflight refuses before a kernel is loaded."""
    import ast
    import re

    from tests.rig.paths import REPO

    made = re.compile(r"\bkexec(_mod)?\.Real\(")
    where = sorted(str(p.relative_to(REPO)) for p in (REPO / "vmharness").rglob("*.py") if made.search(p.read_text()))
    assert where == ["vmharness/cli/run.py"], where
    tests = [str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")
             if "rig" not in p.relative_to(REPO / "tests").parts[:1] and made.search(p.read_text())]
    assert tests == [], tests
    assert "kexec-tools" not in (REPO / "Makefile").read_text()
    # the benchmarks switch only the rig's L1: every call whose argv names kexec's program (as a word of a
    # list's string) is an L1's `run` (its agent), and none uses the harness's own kexec
    program = re.compile(r"(^|[\s;&|])kexec(\s|$)")
    for path in (REPO / "benchmarks").rglob("*.py"):
        text = path.read_text()
        assert "hostboots.kexec" not in text and "hostboots import kexec" not in text, path
        for call in (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)):
            words = [e.value for a in call.args if isinstance(a, ast.List) for e in a.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if any(program.search(w) for w in words):
                f = call.func
                assert isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name) \
                    and f.value.id in ("l1", "rig"), (path, call.lineno, ast.unparse(call))
