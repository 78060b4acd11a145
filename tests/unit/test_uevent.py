"""The waiter's own logic: when it reads the condition, what it takes from the monitor, and how it
falls back to polling and says so. The kernel's real events are tested in
tests/integration/test_uevent_live.py."""

from __future__ import annotations

import errno
import json
import sys
import textwrap
import time
from dataclasses import dataclass

from vmharness.system import proc
from vmharness.system.uevent import Waiter


@dataclass(frozen=True)
class Event:
    action: str
    sys_path: str


class Script:
    """A monitor that hands out queued events, then raises or says "nothing", as told."""

    def __init__(self, *events: Event, then: OSError | None = None) -> None:
        self.events = list(events)
        self.then = then
        self.polls = 0

    def poll(self, timeout: float | None = None) -> Event | None:
        self.polls += 1
        if self.events:
            return self.events.pop(0)
        if self.then is not None:
            raise self.then
        return None


class HoldsOnRead:
    """A condition that holds from its `n`th read on."""

    def __init__(self, n: int) -> None:
        self.n, self.reads = n, 0

    def __call__(self) -> bool:
        self.reads += 1
        return self.reads >= self.n


def test_a_condition_that_already_holds_returns_without_listening() -> None:
    with Waiter(("pci",)) as waiter:
        script = Script()
        waiter.monitor = script
        assert waiter.wait(lambda: True, timeout=5)
    assert script.polls == 0


def test_a_condition_that_never_holds_gives_up_at_the_timeout() -> None:
    with Waiter(("pci",)) as waiter:
        began = time.monotonic()
        assert not waiter.wait(lambda: False, timeout=0.2)
        took = time.monotonic() - began
    # Never before the timeout; after it by what a loaded machine adds, which stays far below 5 s.
    assert 0.2 <= took < 5.0


def test_events_queued_behind_the_first_are_taken_in_one_wake() -> None:
    with Waiter(("pci",)) as waiter:
        waiter.monitor = Script(Event("unbind", "/sys/devices/pci0000:00/0000:00:03.0"),
                                Event("bind", "/sys/devices/pci0000:00/0000:00:03.0"))
        condition = HoldsOnRead(2)
        assert waiter.wait(condition, timeout=5)
    assert list(waiter.heard) == ["unbind /sys/devices/pci0000:00/0000:00:03.0",
                                  "bind /sys/devices/pci0000:00/0000:00:03.0"]
    assert condition.reads == 2, "one wake, one more read of the condition"


def test_lost_events_only_make_the_waiter_read_the_condition_again() -> None:
    with Waiter(("pci",)) as waiter:
        script = Script(then=OSError(errno.ENOBUFS, "No buffer space available"))
        waiter.monitor = script
        assert waiter.wait(HoldsOnRead(3), timeout=5)
        assert waiter.monitor is script and waiter.polling is None


def test_a_monitor_that_fails_mid_wait_turns_the_waiter_to_polling_and_says_why() -> None:
    with Waiter(("pci",)) as waiter:
        waiter.monitor = Script(then=OSError(errno.EBADF, "Bad file descriptor"))
        assert waiter.wait(HoldsOnRead(3), timeout=5)
        assert waiter.monitor is None
        assert waiter.polling == "the device-event monitor failed ([Errno 9] Bad file descriptor)"


CHILD = textwrap.dedent("""
    import json, logging, resource, sys
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(message)s")
    from vmharness.system.uevent import Waiter
    Waiter(("pci",)).close()  # libudev loaded while file descriptors are still to be had
    resource.setrlimit(resource.RLIMIT_NOFILE, (3, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    reads = []
    waiter = Waiter(("pci",))
    held = waiter.wait(lambda: reads.append(1) is None and len(reads) == 4, timeout=5)
    print(json.dumps({"polling": waiter.polling, "held": held, "reads": len(reads)}))
""")


def test_a_waiter_that_cannot_open_its_monitor_polls_and_says_so() -> None:
    # a real failure, not a stub: a process with no file descriptor left cannot open the netlink socket
    res = proc.run([sys.executable, "-c", CHILD], timeout=60)
    out = json.loads(res.stdout)
    assert out["held"] and out["reads"] == 4
    assert out["polling"].startswith("no device-event monitor ("), out["polling"]
    assert "waiting on pci by polling every 0.05 s: no device-event monitor" in res.stderr
