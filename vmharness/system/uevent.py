"""Wait for a sysfs condition, woken by the kernel's device events instead of sleeping in a loop.

A pyudev monitor hears the events; the condition read from sysfs is the truth, an event only says
"look again". The monitor listens to the kernel's source, not udevd's:
- the condition reads sysfs, which the kernel has already changed when it sends its event; udevd's
  event comes later, after its rules ran, and makes no condition here truer;
- libudev silently disables the udev source when udevd is not running (no /run/udev/control), as on
  CI, in the nested rig's L1 and in containers: a wait would then hear nothing at all.
A wait that needs udevd's work done (an interface udev renamed) must say so in its condition.

The monitor is filtered to the subsystems the caller waits on (pci for bind/unbind, net for an
interface, vfio for /dev/vfio/N), so other devices' events do not wake the wait. The condition is
read again at least every second all the same: an event can be lost (a full socket buffer), or never
sent to this network namespace. Where no monitor can be opened (no libudev, no file descriptors,
no permission), the waiter polls every 50 ms and says why in `polling` and on the debug log.
"""

from __future__ import annotations

import errno
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import lru_cache
from types import TracebackType
from typing import Any, Protocol

log = logging.getLogger("vmharness.host")

POLL_INTERVAL = 0.05  # without a monitor
RECHECK_INTERVAL = 1.0  # with one: the longest the condition goes unread

BIND_EVENTS = ("pci",)  # a driver bound or unbound: "bind"/"unbind" on the PCI device
APPEAR_EVENTS = ("net", "vfio")  # an interface, or a VFIO group's /dev/vfio/N, came or went


class Device(Protocol):
    """What the waiter reads of an event's device (a `pyudev.Device`)."""

    @property
    def action(self) -> str | None: ...

    @property
    def sys_path(self) -> str: ...


class Monitor(Protocol):
    def poll(self, timeout: float | None = None) -> Device | None: ...


@lru_cache(maxsize=1)
def _context() -> Any:
    """One libudev context per process (pyudev has no type hints: the value is a `pyudev.Context`)."""
    import pyudev  # imported when first needed: a command that binds nothing does not pay for it

    return pyudev.Context()


def open_monitor(subsystems: Sequence[str]) -> Monitor:
    """A started monitor of the kernel's events for `subsystems`; OSError or ImportError if none can be had."""
    import pyudev

    monitor = pyudev.Monitor.from_netlink(_context(), source="kernel")
    for subsystem in subsystems:
        monitor.filter_by(subsystem)
    monitor.start()
    opened: Monitor = monitor
    return opened


class Waiter:
    """Open before making the change (so no event is missed), then `wait(condition, timeout)`."""

    def __init__(self, subsystems: Sequence[str]) -> None:
        self.subsystems = tuple(subsystems)
        self.polling: str | None = None  # why there is no monitor, when there is none
        self.heard: deque[str] = deque(maxlen=32)  # "action /sys/path" of the events that woke it
        self.monitor: Monitor | None = None
        try:
            self.monitor = open_monitor(self.subsystems)
        except (OSError, ImportError) as exc:
            self._poll_from_now(f"no device-event monitor ({exc})")

    def _poll_from_now(self, why: str) -> None:
        self.monitor = None
        self.polling = why
        log.debug("waiting on %s by polling every %g s: %s", "/".join(self.subsystems), POLL_INTERVAL, why)

    def wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if condition():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self.monitor is None:
                time.sleep(min(POLL_INTERVAL, remaining))
            else:
                self._listen(self.monitor, min(RECHECK_INTERVAL, remaining))

    def _listen(self, monitor: Monitor, seconds: float) -> None:
        """Return on the first event that passes the filter (after taking the ones queued behind it),
        or after `seconds`. libudev drops filtered events itself; `poll` then returns None early."""
        until = time.monotonic() + seconds
        try:
            while (left := until - time.monotonic()) > 0:
                device = monitor.poll(timeout=left)
                if device is None:
                    continue
                while device is not None:
                    self.heard.append(f"{device.action} {device.sys_path}")
                    device = monitor.poll(timeout=0)
                return
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:  # ENOBUFS: events were lost; reading the condition again is enough
                self._poll_from_now(f"the device-event monitor failed ({exc})")

    def close(self) -> None:
        self.monitor = None  # pyudev closes the socket when the monitor is collected, at once in CPython

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
