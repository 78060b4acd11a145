"""Wait for a sysfs condition, woken by the kernel's uevents instead of sleeping in a loop.

A NETLINK_KOBJECT_UEVENT socket subscribed to the kernel's multicast group hears bind/unbind/add events
without udevd. The events only wake the waiter: the condition read from sysfs is the truth. Where the
socket cannot be opened (another network namespace, no permission), it polls every 50 ms instead.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from types import TracebackType

NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP = 1
POLL_INTERVAL = 0.05


class Waiter:
    """Open before making the change (so no event is missed), then `wait(condition, timeout)`."""

    def __init__(self) -> None:
        self.sock: socket.socket | None
        try:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
                                      NETLINK_KOBJECT_UEVENT)
            self.sock.bind((0, KERNEL_GROUP))
            self.sock.setblocking(False)
        except OSError:
            self.sock = None

    def wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if condition():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self.sock is None:
                time.sleep(min(POLL_INTERVAL, remaining))
                continue
            ready, _, _ = select.select([self.sock], [], [], min(remaining, 0.5))
            while ready:
                try:
                    self.sock.recv(65536)
                except BlockingIOError:
                    break

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
