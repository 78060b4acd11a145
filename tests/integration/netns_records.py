"""Which network namespaces tests/integration/netns_host.py made, and giving back those of a killed run.

Each namespace's maker (PID, start time, boot) is on record in RECORDS before the namespace is made, and
the record goes once the namespace has. A record whose maker is gone names a leftover: the next
netns_host gives back what runs in it, its veth pair, the namespace and its temp dir, then the record.
Why: a local run killed inside netns_host left vmh-tune1, and the next CI run on that machine failed on
it ("network namespace vmh-tune1 exists already"). A namespace with no record is not these tests', and
stays; so does one whose record is damaged."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.system import proc
from vmharness.system.machine import Machine, start_time
from vmharness.userfile import read_inside

log = logging.getLogger("tests.integration.netns_records")

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")  # a netns host's name; its namespace is vmh-<name>
NETNS_DIR = Path("/run/netns")  # where `ip netns` keeps each namespace's mount
RECORDS = Path("/run/vmharness-tests/netns")  # <namespace>: who made it, while it stands
RECORD_LIMIT = 4096
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
IP_TIMEOUT = 30.0


def ip(*args: str, check: bool = True) -> proc.Result:
    """`ip ARGS`, with a timeout."""
    return proc.run(["ip", *args], timeout=IP_TIMEOUT, check=check)


def _maker(pid: int) -> list[str | int | None]:
    return [pid, start_time(Machine(), pid), BOOT_ID.read_text().strip()]


def record(netns: str, interface: str, tmp: Path) -> None:
    """The namespace's record, made before the namespace; refused if one is there (a maker still at work,
    or a leftover that could not be given back)."""
    RECORDS.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = json.dumps({"maker": _maker(os.getpid()), "interface": interface, "tmp": str(tmp)})
    try:
        fd = os.open(RECORDS / netns, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise HarnessError(f"network namespace {netns} is on record in {RECORDS} already",
                           "another test is making it, or its leftover could not be given back") from None
    with os.fdopen(fd, "w") as out:
        out.write(text)


def forget(netns: str, tmp: Path) -> None:
    """The temp dir, then the record, once the namespace has gone and if the record is this one's."""
    shutil.rmtree(tmp, ignore_errors=True)
    record = _read_record(RECORDS / netns)
    if not (NETNS_DIR / netns).exists() and record is not None and record["tmp"] == str(tmp):
        (RECORDS / netns).unlink()


def _read_record(path: Path) -> dict[str, object] | None:
    """A record as these tests wrote it; None for anything else (it is then left alone)."""
    try:  # a regular file of one name, no link, at most RECORD_LIMIT bytes
        record = json.loads(read_inside(path.parent, path.name, RECORD_LIMIT))
    except (OSError, HarnessError, ValueError):
        return None
    ok = (isinstance(record, dict) and isinstance(record.get("maker"), list) and len(record["maker"]) == 3
          and isinstance(record["maker"][0], int) and isinstance(record.get("interface"), str)
          and isinstance(record.get("tmp"), str))
    return record if ok else None


def give_back_leftovers() -> None:
    """Each namespace on record whose maker is gone (killed, or from an earlier boot) is given back: what
    runs in it, its veth pair, the namespace, its temp dir, then the record."""
    if not RECORDS.is_dir():
        return
    fd = os.open(RECORDS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # one giver at a time: the streams start side by side
        _give_back_each()
    finally:
        os.close(fd)


def _give_back_each() -> None:
    for path in sorted(RECORDS.iterdir()):
        record = _read_record(path)
        if record is None or not path.name.startswith("vmh-") or not NAME.fullmatch(path.name[4:]):
            log.warning("%s is not a record these tests wrote: left alone", path)
            continue
        maker = record["maker"]
        assert isinstance(maker, list)
        if _maker(maker[0]) == maker:
            continue  # its maker is at work
        netns, tmp = path.name, Path(str(record["tmp"]))
        log.warning("giving back network namespace %s, left by a killed run (maker %s)", netns, maker)
        if (NETNS_DIR / netns).exists():
            kill_all_in(netns)
            ip("-n", netns, "link", "delete", str(record["interface"]), check=False)  # its peer goes with it
            ip("netns", "delete", netns)
        if tmp.parent == Path(tempfile.gettempdir()) and tmp.name.startswith(f"{netns}-"):
            forget(netns, tmp)
        else:
            log.warning("%s names %s as its temp dir: the record is left", path, tmp)


def kill_all_in(netns: str) -> None:
    """SIGTERM to every process in the namespace, then SIGKILL to those left after 5 s."""
    try:
        ns = os.stat(NETNS_DIR / netns)
    except FileNotFoundError:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _pids_in(ns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5.0
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = _pids_in(ns)
        if not pids:
            return


def _pids_in(ns: os.stat_result) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:  # gone, or a kernel thread
            continue
        if (st.st_dev, st.st_ino) == (ns.st_dev, ns.st_ino):
            pids.append(int(entry))
    return pids
