"""Driver binding through sysfs, the way the kernel intends: driver_override, unbind, drivers_probe,
then a check that the driver really is the one asked for (drivers_probe succeeds even when nothing binds).
The journal's `bind` op (a device's driver before, its interfaces' names, MTU and flags) is undone here."""

from __future__ import annotations

from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.journal.journal import Op, Record
from vmharness.journal.kinds import OpKind
from vmharness.system import proc, sysfs
from vmharness.system.root import HostRoot
from vmharness.system.uevent import APPEAR_EVENTS, BIND_EVENTS, Waiter

BIND_TIMEOUT = 15.0
DEV = sysfs.PCI_DEVICES


def driver(root: HostRoot, bdf: str) -> str | None:
    return root.readlink_name(f"{DEV}/{bdf}/driver")


def override(root: HostRoot, bdf: str) -> str | None:
    value = root.read_optional(f"{DEV}/{bdf}/driver_override")
    return None if value in (None, "", "(null)") else value


def set_override(root: HostRoot, bdf: str, name: str | None) -> None:
    """A newline clears driver_override, as the kernel documents."""
    if override(root, bdf) != name:
        root.write_text(f"{DEV}/{bdf}/driver_override", (name or "") + "\n")


def _expect(root: HostRoot, bdf: str, want: str | None, waiter: Waiter) -> None:
    if not waiter.wait(lambda: driver(root, bdf) == want, BIND_TIMEOUT):
        raise HarnessError(
            f"{bdf} is on {driver(root, bdf) or 'no driver'} after {BIND_TIMEOUT:g} s, expected {want or 'none'}",
            "dmesg says why the driver refused the device")


def unbind(root: HostRoot, bdf: str) -> None:
    current = driver(root, bdf)
    if current is None:
        return
    with Waiter(BIND_EVENTS) as waiter:
        root.write_text(f"{DEV}/{bdf}/driver/unbind", bdf)
        _expect(root, bdf, None, waiter)


def to_driver(root: HostRoot, bdf: str, name: str | None, override_after: str | None) -> None:
    """Move `bdf` to driver `name` (None: leave it driverless) and leave `override_after` in
    driver_override. Setting the override first makes drivers_probe pick exactly that driver."""
    if driver(root, bdf) == name:
        set_override(root, bdf, override_after)
        return
    unbind(root, bdf)
    set_override(root, bdf, name)
    if name is not None:
        with Waiter(BIND_EVENTS) as waiter:
            root.write_text("/sys/bus/pci/drivers_probe", bdf)
            _expect(root, bdf, name, waiter)
    set_override(root, bdf, override_after)


def wait_for(root: HostRoot, path: str, timeout: float = 5.0) -> bool:
    """Wait for an interface's or a VFIO group's path to appear: both come with a net or vfio event."""
    with Waiter(APPEAR_EVENTS) as waiter:
        return waiter.wait(lambda: root.exists(path), timeout)


# the journal's bind op: the device back on its driver, its interfaces back under their names ---------
def _describe_bind(rec: Record) -> str:
    return f"{rec['bdf']}: back to {rec['driver'] or 'no driver'} (driver_override {rec['override'] or 'cleared'})"


def _netdev_back(root: HostRoot, bdf: str, name: str) -> bool:
    """Wait for the device's interface; give it back its old name if the kernel chose another."""
    dev_net = f"{DEV}/{bdf}/net"
    if not wait_for(root, dev_net, timeout=10):
        return False
    now = root.listdir(dev_net)
    if name in now:
        return True
    if len(now) == 1 and not root.exists(f"/sys/class/net/{name}"):
        proc.run(["ip", "link", "set", "dev", now[0], "name", name], timeout=10)
    return wait_for(root, f"/sys/class/net/{name}", timeout=5)


def _undo_bind(root: HostRoot, rec: Record) -> list[str]:
    to_driver(root, rec["bdf"], rec["driver"], rec["override"])
    problems = []
    for n in rec.get("netdevs", []):
        name = n["name"]
        if not _netdev_back(root, rec["bdf"], name):
            problems.append(f"{rec['bdf']}: interface {name} did not come back under that name")
            continue
        for attr in ("mtu", "flags"):
            if n.get(attr) is not None and root.read_optional(f"/sys/class/net/{name}/{attr}") != n[attr]:
                root.write_text(f"/sys/class/net/{name}/{attr}", n[attr])
    return problems


def _netdevs(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(n, dict) and isinstance(n.get("name"), str) for n in v)


journal.register(OpKind.BIND, Op(_describe_bind, _undo_bind, ("bdf", "driver", "override"), types={
    "bdf": journal.is_str, "driver": journal.str_or_none, "override": journal.str_or_none, "netdevs": _netdevs}))
