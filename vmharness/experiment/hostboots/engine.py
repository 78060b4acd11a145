"""Going round the host boots of a run: measure the instances of the host boot the host is in, give
back what the run took in it, load the next one's kernel (journaled), switch, and on arrival check the
host before anything is measured. Every step is written to the state file (state.py) before it is
taken, so `step` called again, by the same process or by the one started after a switch or a kill,
goes on from where the last one was:

- `ready` and the boot id still the one checked on arrival: the stop is measured (again, if a kill
  cut it short: the run folder keeps what was measured and a resumed run measures only what is
  missing). Another boot id: the host rebooted under the run, so the stop's switch is made again.
- `switching`: the arrival is checked (arrival.py). What was asked: `ready`. Anything else (another
  kernel, another command line, the same boot as before the switch) is said; the switch is made again
  up to MAX_REDO times, then the run stops with the reason, never measuring under the wrong label.
- past the last stop: home (the boot the run started in, checked like any arrival), then done: the
  state file is removed.
- a stop whose instances were all dropped (a host switch that changes nothing here: unchanged.py) is
  passed over: its host boot is not booted again.

`kexec` (kexec.py) is the one way out of a host boot; the unit tests pass a fake."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from vmharness.errors import HarnessError
from vmharness.experiment.hostboots import arrival, target
from vmharness.experiment.hostboots import kexec as kexec_mod
from vmharness.experiment.hostboots.plan import START, Stop
from vmharness.experiment.hostboots.state import State, Store
from vmharness.experiment.hostboots.target import Target
from vmharness.system.root import HostRoot

MAX_REDO = 2  # switches made again for one stop before the run stops
Outcome = Literal["switched", "done"]


@dataclass
class Engine:
    root: HostRoot
    store: Store
    kexec: kexec_mod.Kexec
    program: str  # kexec's path on the host (checks.check_kexec)
    stops: list[Stop]
    targets: Callable[[], dict[str, Target]]  # each host boot in use, START's the way home (target.all_of),
    # checked once, when the run begins: later host boots read what was checked then from the state
    measure: Callable[[Stop], None]
    give_back: Callable[[], None]  # everything the run took in this host boot
    owner: str  # the journal's owner of the kexec record
    say: Callable[[str], None]
    skip: Callable[[Stop], bool] = lambda _: False  # a stop with nothing left to measure (unchanged.py): not booted

    def _goal(self, st: State) -> Target:
        """The target of stop `next` (home past the last), its files checked again."""
        boot = self.stops[st.next].boot if st.next < len(self.stops) else START
        if boot not in st.targets:
            raise HarnessError(f"{self.store.path}: the run's state names no host boot {boot!r}",
                               "it is damaged or another configuration's: host-restore, then start the run again")
        return target.recheck(st.targets[boot])

    def _label(self, st: State) -> str:
        return self.stops[st.next].label if st.next < len(self.stops) else "home: the boot the run started in"

    def begin(self, run: str) -> State:
        """The state of a new run, started in the boot it names START (checked as an arrival is)."""
        now, targets = arrival.facts(self.root), self.targets()
        found = arrival.problems(targets[START], now, None, None)
        if found:
            raise HarnessError(f"the host is not in the boot it would come home to: {found[0]}",
                               "the running kernel and command line must be what /boot and /proc/cmdline say")
        st = State(run=run, visits={START: _kept(now)}, boot_id=str(now.get("boot_id")),
                   targets={name: t.to_json() for name, t in targets.items()})
        st.phase = "ready" if self.stops[0].boot == START else "switch"
        self.store.save(st)
        return st

    def step(self, run: str) -> Outcome:
        """Go on from where the state file says until the host switches ("switched": with the real
        kexec this does not return) or the run is done and home ("done")."""
        st = self.store.load()
        if st is None:
            st = self.begin(run)
        if st.run != run:
            raise HarnessError(f"{self.store.path}: the host boots are another run's ({st.run[:200]})",
                               "resume that run, or host-restore and remove the state file")
        if st.next > len(self.stops):
            raise HarnessError(f"{self.store.path}: the run's state is at stop {st.next + 1} of {len(self.stops)}",
                               "it is damaged or another configuration's: host-restore, then start the run again")
        if st.phase == "stopped":
            raise HarnessError(f"the run stopped its host boots: {st.reason}", "host-restore, then start it again")
        if st.phase == "switching":
            self._arrive(st)
        while True:
            if st.phase == "ready":
                now = arrival.facts(self.root)
                if now.get("boot_id") != st.boot_id:
                    self.say(f"the host booted again under the run ({self._label(st)}): switching to it again")
                    st.phase = "switch"
                    self.store.save(st)
                    continue
                if st.next >= len(self.stops):
                    self.store.remove()
                    return "done"
                here = self.stops[st.next].boot
                self.measure(self.stops[st.next])
                st.next, st.phase, st.redone = st.next + 1, "switch", 0
                while st.next < len(self.stops) and self.skip(self.stops[st.next]):
                    self.say(f"{self.stops[st.next].label}: not booted, nothing of it is left to measure")
                    st.next += 1
                if st.next == len(self.stops) and here == START:
                    st.phase = "ready"  # home already
                self.store.save(st)
            else:
                self._switch(st)
                return "switched"

    def _switch(self, st: State) -> None:
        goal = self._goal(st)
        self.give_back()
        before = arrival.facts(self.root)
        st.phase, st.expected, st.boot_before = "switching", goal.boot, str(before.get("boot_id"))
        self.store.save(st)
        self.say(f"switching the host to {self._label(st)}: kexec -l {goal.kernel.path} --append={goal.cmdline!r}")
        kexec_mod.load(self.root, self.kexec, goal, self.program, self.owner)
        self.kexec.execute()

    def _arrive(self, st: State) -> None:
        goal = self._goal(st)
        now = arrival.facts(self.root)
        found = arrival.problems(goal, now, st.boot_before, st.visits.get(goal.boot))
        st.arrivals.append({"stop": st.next, "boot": goal.boot, "release": now.get("release"),
                            "cmdline": now.get("cmdline"), "problems": found})
        if not found:
            st.phase, st.boot_id = "ready", str(now.get("boot_id"))
            st.visits.setdefault(goal.boot, _kept(now))
        elif st.redone < MAX_REDO:
            self.say(f"{self._label(st)}: the host is not in the host boot asked for: {found[0]}; switching again")
            st.phase, st.redone = "switch", st.redone + 1
        else:
            st.phase, st.reason = "stopped", f"{self._label(st)}: {found[0]} ({st.redone + 1} times)"
        self.store.save(st)
        if st.next > len(self.stops):
            raise HarnessError(f"{self.store.path}: the run's state is at stop {st.next + 1} of {len(self.stops)}",
                               "it is damaged or another configuration's: host-restore, then start the run again")
        if st.phase == "stopped":
            raise HarnessError(f"the host boots stopped: {st.reason}", "nothing was measured under that label; "
                               "look at the host's boot log, then host-restore")


def _kept(now: dict[str, Any]) -> dict[str, Any]:
    return {k: now.get(k) for k in arrival.SAME_ON_EVERY_VISIT}
