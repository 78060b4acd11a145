"""The host-boot engine (experiment/hostboots/engine.py) against a fake host and a fake kexec
(tests/hostboot_kit.py): nothing here runs kexec. A run goes round its host boots measuring each stop
in the host boot it names, gives back before each switch, journals each load before it, checks every
arrival (a wrong kernel is redone, then stops the run, never measured), resumes from its state file
after a kill at any step, and ends home."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests import hostboot_kit
from tests.hostboot_kit import HOME_CMDLINE, HOME_RELEASE, BootingHost, FakeKexec
from vmharness.errors import HarnessError
from vmharness.experiment.hostboots import engine, plan
from vmharness.experiment.hostboots.state import Store
from vmharness.model import config

TOML = ('[guest]\naccel = "tcg"\n[sweep]\niterations = 2\n[[host_boot]]\nname = "v2off"\n'
        'kernel = "/boot/vmlinuz-x"\ncmdline = "spectre_v2=off"\n[[instance]]\nname = "a"\n'
        '[[instance]]\nname = "b"\nhost_boot = "v2off"\n')
RUN = "/var/lib/vmharness/runs/r1"


class Killed(Exception):
    """A SIGKILL at one step: nothing after it runs in that process."""


class World:
    def __init__(self, tmp: Path, kill_at: int | None = None, toml: str = TOML) -> None:
        cfg_path = tmp / "c.toml"
        cfg_path.write_text(toml)
        self.stops = plan.stops(config.load_run(cfg_path))
        (tmp / "host").mkdir()
        self.host = BootingHost(tmp / "host")
        self.targets, releases = hostboot_kit.targets(hostboot_kit.trusted(f"hostboot-{tmp.name}"))
        self.kexec = FakeKexec(self.host, releases)
        self.events: list[str] = []
        self.measured: list[tuple[int, str, str, str]] = []
        self.kill_at = kill_at
        self.count = 0
        self.skip: Callable[[plan.Stop], bool] = lambda _: False

    def _tick(self, what: str) -> None:
        self.count += 1
        self.events.append(what)
        if self.count == self.kill_at:
            raise Killed(what)

    def engine(self) -> engine.Engine:
        def measure(stop: plan.Stop) -> None:
            self._tick("measure")
            self.measured.append((stop.round, stop.boot, self.host.release, self.host.cmdline))

        self.kexec.tick = self._tick
        return engine.Engine(self.host.root, Store(self.host.base), self.kexec, "/usr/sbin/kexec", self.stops,
                             self.targets, measure, lambda: self._tick("give back"), "run:test", lambda _: None,
                             self.skip)

    def run(self, wrong: int = 0) -> None:
        """Step until done, booting the fake host after each switch (`wrong` times into the wrong kernel)."""
        for _ in range(50):
            try:
                if self.engine().step(RUN) == "done":
                    return
            except Killed:
                continue  # a new process resumes; the host did not reboot
            if self.kexec.loaded is not None and self.kexec.calls[-1] == "execute":
                if wrong:
                    wrong -= 1
                    self.kexec.arrive(("5.10.0-99-amd64", "root=/dev/vda"))
                else:
                    self.kexec.arrive()
        raise AssertionError("the run did not end")


def _right(world: World, m: tuple[int, str, str, str]) -> bool:
    _, boot, release, cmdline = m
    want = world.targets()[boot]
    return release == want.release and cmdline == want.cmdline


def test_the_run_goes_round_the_host_boots_measures_each_in_its_own_and_ends_home(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.run()
    assert [(m[0], m[1]) for m in world.measured] == [(s.round, s.boot) for s in world.stops]
    assert [(s.round, s.boot) for s in world.stops] == [(0, ""), (0, "v2off"), (1, "v2off"), (1, "")]
    assert all(_right(world, m) for m in world.measured)
    assert world.measured[1][2:] == ("7.3.4+deb13-amd64", "root=/dev/vda ro quiet spectre_v2=off")
    # every stop its own host boot (one per round, even where two rounds meet in the same host boot); the
    # last is the run's own, so it is home already
    assert world.host.boots == 1 + 3
    assert plan.switches(config.load_run(tmp_path / "c.toml")) == 3
    assert (world.host.release, world.host.cmdline) == (HOME_RELEASE, HOME_CMDLINE)
    assert not (tmp_path / "host/var/lib/vmharness/hostboots/state.json").exists()
    # given back before every switch, loaded before it executes
    switches = [i for i, e in enumerate(world.events) if e == "load"]
    assert all(world.events[i - 1] == "give back" and world.events[i + 1] == "execute" for i in switches)


def test_a_host_that_arrives_in_another_kernel_is_switched_again_and_never_measured_there(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.run(wrong=1)
    assert all(_right(world, m) for m in world.measured)
    assert [(m[0], m[1]) for m in world.measured] == [(s.round, s.boot) for s in world.stops]


def test_a_host_that_keeps_arriving_wrong_stops_the_run_with_the_reason(tmp_path: Path) -> None:
    world = World(tmp_path)
    with pytest.raises(HarnessError, match=r"5\.10\.0-99-amd64.*3 times"):
        world.run(wrong=engine.MAX_REDO + 1)
    assert all(_right(world, m) for m in world.measured) and len(world.measured) == 1
    assert hostboot_kit.state(tmp_path / "host")["phase"] == "stopped"
    with pytest.raises(HarnessError, match="stopped its host boots"):
        world.engine().step(RUN)


def test_a_host_rebooted_under_the_run_is_switched_again_before_it_is_measured(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.kill_at = 2  # killed at the first give back, after the first measurement
    with pytest.raises(Killed):
        world.engine().step(RUN)
    world.host.boot("5.10.0-99-amd64", "root=/dev/vda")  # someone rebooted the host meanwhile
    world.run()
    assert all(_right(world, m) for m in world.measured)


def test_another_runs_state_is_refused(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.engine().step(RUN)
    with pytest.raises(HarnessError, match="another run's"):
        world.engine().step("/elsewhere")


def test_a_kernel_changed_between_host_boots_is_refused(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.engine().step(RUN)  # measured in the first, switched to v2off
    Path(world.targets()["v2off"].kernel.path).write_bytes(hostboot_kit.bzimage("7.3.4+deb13-amd64") + b"x")
    world.kexec.arrive()
    with pytest.raises(HarnessError, match="changed since the run began"):
        world.engine().step(RUN)



@pytest.mark.parametrize("kill_at", range(1, 16))
def test_killed_at_any_step_the_run_resumes_where_it_was_and_ends_home(tmp_path: Path, kill_at: int) -> None:
    world = World(tmp_path, kill_at)
    world.run()
    # every stop measured, in order, in its own host boot; a stop cut short is measured again there
    stops = [(s.round, s.boot) for s in world.stops]
    seen = [(m[0], m[1]) for m in world.measured]
    assert list(dict.fromkeys(seen)) == stops and len(seen) <= len(stops) + 1
    assert all(_right(world, m) for m in world.measured)
    assert (world.host.release, world.host.cmdline) == (HOME_RELEASE, HOME_CMDLINE)
    assert not (tmp_path / "host/var/lib/vmharness/hostboots/state.json").exists()


def test_a_run_whose_instances_all_run_elsewhere_switches_first_and_comes_home(tmp_path: Path) -> None:
    world = World(tmp_path, toml=TOML.replace('name = "a"\n', 'name = "a"\nhost_boot = "v2off"\n'))
    world.run()
    assert [(m[0], m[1]) for m in world.measured] == [(0, "v2off"), (1, "v2off")]
    assert [s.instances for s in world.stops] == [("a", "b"), ("b", "a")]  # both measured in each, rotated
    assert all(_right(world, m) for m in world.measured)
    assert world.host.boots == 1 + 2 + 1  # the first switch, one between the rounds, home
    assert (world.host.release, world.host.cmdline) == (HOME_RELEASE, HOME_CMDLINE)


@pytest.mark.parametrize(("field", "value", "needle"), [("next", 99, "at stop 100 of 4"),
                                                        ("targets", {}, "names no host boot 'v2off'")])
def test_a_state_that_does_not_fit_the_plan_is_refused(tmp_path: Path, field: str, value: object,
                                                      needle: str) -> None:
    world = World(tmp_path)
    world.engine().step(RUN)
    store = Store(world.host.base)
    st = store.load()
    assert st is not None
    setattr(st, field, value)
    store.save(st)
    world.kexec.arrive()
    with pytest.raises(HarnessError, match=needle):
        world.engine().step(RUN)
