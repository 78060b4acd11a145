"""The one reader of host files: regular files only, a size cap, never a blocking read, and a
`--host-root` tree that nothing writes into. The same rules for another machine's files (`machine.read`
and the tuning targets built on it), tried here through a runner that runs the script locally."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import forked_cli
from tests.fakehost import FakeHost
from tests.unit.test_cli_errors import assert_one_line_error
from vmharness.errors import HarnessError
from vmharness.host.snapshot import snapshot
from vmharness.system import batched, machine, proc
from vmharness.system.root import HostRoot
from vmharness.tune.access import ShellTarget
from vmharness.userfile import MAX_READ

BDF = "0000:00:03.0"


def with_fifo(host: FakeHost, attr: str = "class") -> Path:
    d = host.pci(BDF, driver="e1000e", group=3)
    real = host.base / d / attr
    real.unlink()
    os.mkfifo(real)
    return real


def no_hang(fn: Callable[..., object], *args: object, seconds: float = 10) -> object:
    """Run fn in a thread: what it returned or raised; fails the test if it is still running."""
    out: list[object] = []

    def target() -> None:
        try:
            out.append(fn(*args))
        except BaseException as exc:  # handed to the test
            out.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for {seconds} s"
    return out[0]


# --- this host's files ---------------------------------------------------------------------------
def test_a_fifo_in_a_host_root_is_refused_without_blocking(host: FakeHost) -> None:
    with_fifo(host)
    root = HostRoot(host.base)
    for read in (root.read_text, root.read_optional, root.read_bytes):
        err = no_hang(read, f"/sys/bus/pci/devices/{BDF}/class")
        assert isinstance(err, HarnessError) and "is a FIFO, not a regular file" in err.message, err


def test_a_device_node_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    os.symlink("/dev/zero", tmp_path / "sys" / "zero")  # a link leading out is refused before the type
    os.mknod(tmp_path / "sys" / "null", 0o600 | 0o020000, os.makedev(1, 3))  # a character device
    root = HostRoot(tmp_path)
    with pytest.raises(HarnessError, match="is a device node"):
        root.read_optional("/sys/null")
    with pytest.raises(HarnessError, match="points outside host root"):
        root.read_optional("/sys/zero")


def test_host_groups_on_a_snapshot_with_a_fifo_is_one_line_not_a_hang(host: FakeHost) -> None:
    with_fifo(host)
    cp = forked_cli.call(["host-groups", "--host-root", str(host.base)], timeout=30, text=True)
    assert_one_line_error((cp.returncode, cp.stdout, cp.stderr), "class", "FIFO")


def test_a_file_over_the_cap_is_refused_by_name(host: FakeHost) -> None:
    host.write("proc/cmdline", "x" * (MAX_READ + 1))
    root = HostRoot(host.base)
    with pytest.raises(HarnessError, match=r"/proc/cmdline is larger than 1048576 bytes"):
        root.read_optional("/proc/cmdline")
    host.write("proc/cmdline", "x" * MAX_READ)
    assert len(root.read_optional("/proc/cmdline") or "") == MAX_READ
    assert len(root.read_text("/proc/cmdline", limit=2 * MAX_READ)) == MAX_READ


def test_read_optional_keeps_its_meaning(host: FakeHost) -> None:
    root = HostRoot(host.base)
    assert root.read_optional("/proc/cmdline") is not None
    assert root.read_optional("/sys/no/such/attribute") is None
    assert root.read_optional("/proc/cmdline/below-a-file") is None  # ENOTDIR
    host.write("proc/empty", "")
    assert root.read_optional("/proc/empty") == ""
    with pytest.raises(HarnessError, match="is missing under host root"):
        root.read_text("/sys/no/such/attribute")


def test_a_symlink_out_of_the_root_is_refused(host: FakeHost, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("outside\n")
    (host.base / "proc" / "leak").symlink_to(secret)
    with pytest.raises(HarnessError, match="points outside host root"):
        HostRoot(host.base).read_optional("/proc/leak")


def test_numbers_that_are_not_name_the_file_and_value(host: FakeHost) -> None:
    host.write("sys/x/count", "lots\n")
    host.write("sys/x/negative", "-3\n")
    host.write("sys/x/node", "-1\n")
    root = HostRoot(host.base)
    with pytest.raises(HarnessError, match=r"/sys/x/count holds 'lots', not an integer"):
        root.read_int("/sys/x/count")
    with pytest.raises(HarnessError, match=r"/sys/x/negative holds '-3', not a count"):
        root.read_int("/sys/x/negative", minimum=0)
    assert root.read_int("/sys/x/node") == -1
    assert root.read_int("/sys/x/absent") is None


# --- writes --------------------------------------------------------------------------------------
def test_every_change_is_refused_off_the_live_host(host: FakeHost) -> None:
    root = HostRoot(host.base)
    host.write("run/vmharness/note", "x")
    before = sorted(str(p.relative_to(host.base)) for p in host.base.rglob("*"))
    for change, args in ((root.write_text, ("/run/vmharness/note", "y")), (root.remove, ("/run/vmharness/note",)),
                         (root.rmdir, ("/run/vmharness",)), (root.mkdir, ("/run/vmharness/lock.d",)),
                         (root.writable, ("/run/vmharness/journal.jsonl",))):
        with pytest.raises(HarnessError, match="it is not the live host"):
            change(*args)
    assert sorted(str(p.relative_to(host.base)) for p in host.base.rglob("*")) == before
    assert (host.base / "run/vmharness/note").read_text() == "x"


def test_changes_are_made_and_logged_where_allowed(host: FakeHost, caplog: pytest.LogCaptureFixture) -> None:
    root = HostRoot(host.base, allow_writes=True)
    with caplog.at_level(logging.DEBUG, logger="vmharness.host"):
        root.mkdir("/run/vmharness", 0o700)
        root.write_text("/run/vmharness/note", "1\n")
        root.remove("/run/vmharness/note")
        root.remove("/run/vmharness/note")  # gone already: fine
        root.rmdir("/run/vmharness")
        root.rmdir("/run/vmharness")
    assert not (host.base / "run/vmharness").exists()
    assert [r.getMessage() for r in caplog.records] == [
        "create /run/vmharness", "write /run/vmharness/note: '1\\n'", "remove /run/vmharness/note",
        "remove /run/vmharness/note", "remove /run/vmharness", "remove /run/vmharness"]


def test_an_empty_host_root_is_refused(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(HarnessError, match="--host-root is empty"):
        HostRoot.open("")
    monkeypatch.setenv("VMHARNESS_HOST_ROOT", " ")
    with pytest.raises(HarnessError, match="VMHARNESS_HOST_ROOT is empty"):
        HostRoot.open()


# --- host-snapshot -------------------------------------------------------------------------------
def test_a_snapshot_of_a_tree_with_a_fifo_leaves_it_out(host: FakeHost, tmp_path: Path) -> None:
    with_fifo(host, "numa_node")
    out = tmp_path / "s.tar.gz"
    assert no_hang(snapshot.write, HostRoot(host.base), out) == out.stat().st_size
    import tarfile

    with tarfile.open(out) as t:
        names = t.getnames()
    assert any(n.endswith(f"{BDF}/class") for n in names)
    assert not any(n.endswith(f"{BDF}/numa_node") for n in names)


def test_a_snapshot_is_never_written_inside_the_host_root(host: FakeHost) -> None:
    with pytest.raises(HarnessError, match="inside host root"):
        snapshot.write(HostRoot(host.base), host.base / "proc" / "s.tar.gz")
    assert not (host.base / "proc" / "s.tar.gz").exists()


def test_a_snapshot_onto_a_fifo_fails_at_once(host: FakeHost, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "out")
    err = no_hang(snapshot.write, HostRoot(host.base), tmp_path / "out")
    assert isinstance(err, HarnessError) and "is not a regular file" in err.message


# --- another machine's files ---------------------------------------------------------------------
def local_runner(argv: list[str]) -> proc.Result:
    return proc.run(argv, timeout=10, check=False)


def test_a_remote_read_answers_as_read_optional(tmp_path: Path) -> None:
    (tmp_path / "f").write_text(" 42 \n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_text("x" * 101)
    assert batched.read_with(local_runner, str(tmp_path / "f"), "m") == "42"
    assert batched.read_with(local_runner, str(tmp_path / "absent"), "m") is None
    assert batched.read_with(local_runner, str(tmp_path / "f" / "below"), "m") is None
    with pytest.raises(HarnessError, match=r"fifo on m is not a regular file"):
        _raise(no_hang(batched.read_with, local_runner, str(tmp_path / "fifo"), "m"))
    with pytest.raises(HarnessError, match=r"big on m is larger than 100 bytes"):
        batched.read_with(local_runner, str(tmp_path / "big"), "m", limit=100)
    assert batched.read_with(local_runner, str(tmp_path / "big"), "m", limit=101) == "x" * 101


def _raise(value: object) -> object:
    if isinstance(value, BaseException):
        raise value
    return value


def test_a_path_is_data_to_the_remote_reader(tmp_path: Path) -> None:
    hostile = tmp_path / "$(touch pwned); `touch pwned2`"
    hostile.write_text("ok")
    assert batched.read_with(local_runner, str(hostile), "m") == "ok"
    assert not (Path.cwd() / "pwned").exists() and not (Path.cwd() / "pwned2").exists()


def test_a_tuning_target_reads_through_the_same_reader(tmp_path: Path) -> None:
    (tmp_path / "rps").write_text("0\n")
    os.mkfifo(tmp_path / "fifo")
    t = ShellTarget("client:x", lambda argv, check: proc.run(argv, timeout=10, check=check), {"kind": "ssh"})
    assert t.read(str(tmp_path / "rps")) == "0"
    assert t.read(str(tmp_path / "nope")) is None
    with pytest.raises(HarnessError, match="client:x is not a regular file"):
        t.read(str(tmp_path / "fifo"))


def test_a_remote_read_that_cannot_run_is_an_error_not_a_missing_file() -> None:
    def ssh_failed(argv: list[str]) -> proc.Result:
        return proc.Result(("ssh", "h", *argv), 255, "", "ssh: connect to host h port 22: Connection refused")

    with pytest.raises(HarnessError, match=r"reading /proc/1/stat on h: .*exit 255.*Connection refused"):
        batched.read_with(ssh_failed, "/proc/1/stat", "h")


def test_this_machine_reads_its_processes_through_host_root() -> None:
    me = machine.Machine()
    assert machine.alive(me, os.getpid())
    assert machine.start_time(me, os.getpid()) is not None
    assert not machine.alive(me, 2**22 + 1)  # above pid_max: never a process
