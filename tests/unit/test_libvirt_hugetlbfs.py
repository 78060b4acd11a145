"""Whether the libvirt daemon sees a hugetlbfs of the guest's page size (libvirt/hugetlbfs.py): the
judgement on facts (a daemon older or newer than the mount, its libvirt/qemu directory, qemu.conf's
hugetlbfs_mount, the modular daemon, one vmharness started), the facts read from a /proc tree, and
hostile qemu.conf values and VMHARNESS_LIBVIRTD."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.host.libvirt import daemon as libvirtd
from vmharness.host.libvirt import driver_daemon, qemu_conf
from vmharness.host.libvirt import hugetlbfs as lh
from vmharness.host.libvirt.hugetlbfs_verdict import Mounted, decide
from vmharness.system.root import HostRoot

G1 = 1 << 20
M2 = 2048
T = 1_700_000_000.0  # a wall-clock time: the daemon's start in most cases
NO_CONF = qemu_conf.Conf(None, 0.0)


def assert_one_line_error(rendered: str) -> None:
    lines = rendered.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), lines


def daemon(started: float = T, name: str = "libvirtd", unit: str | None = None, owned: bool = False,
           argv: tuple[str, ...] = ("/usr/sbin/libvirtd", "-d")) -> driver_daemon.Daemon:
    return driver_daemon.Daemon(812, name, started, argv, unit, owned)


def mount(ctime: float, path: str = "/run/vmharness/hugepages-1G", libvirt_dir: bool = False) -> Mounted:
    return Mounted(path, ctime, libvirt_dir)


def test_a_mount_older_than_the_daemon_is_seen() -> None:
    v = decide(daemon(), G1, [mount(T - 60)], NO_CONF, "8G")
    assert v.sees and not v.fix
    assert v.said == ("libvirtd (pid 812) sees the 1G hugetlbfs at /run/vmharness/hugepages-1G (mounted before it "
                      "started)")


def test_a_mount_newer_than_the_daemon_is_refused_with_the_command_that_restarts_it() -> None:
    v = decide(daemon(), G1, [mount(T + 5)], NO_CONF, "8G")
    assert not v.sees
    assert v.said == ("libvirtd (pid 812) started before the 1G hugetlbfs at /run/vmharness/hugepages-1G was "
                      "mounted: it does not see it")
    assert v.fix == ("restart it: kill 812 && while kill -0 812 2>/dev/null; do sleep 0.2; done && "
                     "/usr/sbin/libvirtd -d")


def test_a_mount_within_a_second_of_the_start_counts_as_newer() -> None:
    """The two clocks are read at different ticks: too close to tell is "does not see"."""
    assert not decide(daemon(), G1, [mount(T - 0.5)], NO_CONF, "8G").sees


def test_the_daemons_libvirt_directory_in_the_mount_is_proof_it_lists_it() -> None:
    """A guest the daemon started made libvirt/qemu in the mount, which moved the mount's ctime past the
    daemon's start: the directory says it lists the mount."""
    v = decide(daemon(), G1, [mount(T + 2, libvirt_dir=True)], NO_CONF, "8G")
    assert v.sees and "its libvirt/qemu directory is there" in v.said


def test_any_seen_mount_of_the_size_will_do() -> None:
    mounts = [mount(T + 5, "/run/vmharness/hugepages-1G"), mount(T - 100, "/dev/hugepages1G")]
    v = decide(daemon(), G1, mounts, NO_CONF, "8G")
    assert v.sees and "/dev/hugepages1G" in v.said


def test_no_mount_of_the_size_names_the_command_that_makes_one() -> None:
    v = decide(daemon(), G1, [], NO_CONF, "8G")
    assert not v.sees and v.said == "no hugetlbfs of pagesize 1G is mounted"
    assert v.fix.startswith("mount one: vmharness host-prepare --hugepages 8G --hugepage-size 1G; then restart it:")


def test_a_mount_about_to_be_made_will_not_be_seen_by_a_running_daemon() -> None:
    v = decide(daemon(), G1, [], NO_CONF, "8G", planned="/run/vmharness/hugepages-1G")
    assert not v.sees and "will not see it" in v.said
    assert v.fix.startswith("once it is mounted, restart it: kill 812")


def test_the_modular_daemon_under_systemd_is_restarted_by_its_unit() -> None:
    v = decide(daemon(name="virtqemud", unit="virtqemud.service", argv=("/usr/sbin/virtqemud", "--timeout",
                                                                       "120")), G1, [mount(T + 5)], NO_CONF, "8G")
    assert not v.sees and v.said.startswith("virtqemud (pid 812) started before")
    assert v.fix == "restart it: systemctl restart virtqemud.service" == f"restart it: {v.restart}"


def test_a_foreground_daemon_is_started_again_as_a_daemon() -> None:
    v = decide(daemon(name="virtqemud", argv=("virtqemud", "--timeout", "120")), M2, [mount(T + 5)], NO_CONF,
               "512M")
    assert v.restart.endswith("&& virtqemud --timeout 120 -d")


def test_the_daemons_own_command_line_is_quoted_in_the_fix() -> None:
    v = decide(daemon(argv=("/opt/libvirt x/libvirtd", "--config", "/etc/a;b")), G1, [mount(T + 5)], NO_CONF,
               "8G")
    assert v.restart.endswith("&& '/opt/libvirt x/libvirtd' --config '/etc/a;b' -d")


def test_qemu_conf_naming_the_mount_lets_it_be_seen() -> None:
    conf = qemu_conf.Conf(("/dev/hugepages", "/run/vmharness/hugepages-1G"), T - 1000)
    assert decide(daemon(), G1, [mount(T - 60)], conf, "8G").sees


def test_qemu_conf_leaving_the_mount_out_names_the_line_to_set() -> None:
    conf = qemu_conf.Conf(("/dev/hugepages",), T - 1000)
    v = decide(daemon(), G1, [mount(T - 60)], conf, "8G")
    assert not v.sees
    assert "uses only the hugetlbfs mounts /etc/libvirt/qemu.conf names (/dev/hugepages)" in v.said
    assert v.fix.startswith('set hugetlbfs_mount = ["/dev/hugepages", "/run/vmharness/hugepages-1G"] in '
                            "/etc/libvirt/qemu.conf, then restart it: kill 812")


def test_qemu_conf_with_no_mounts_disables_them_all() -> None:
    v = decide(daemon(), G1, [mount(T - 60)], qemu_conf.Conf((), T - 1000), "8G")
    assert not v.sees and "names (none)" in v.said


def test_qemu_conf_changed_after_the_daemon_started_is_not_trusted() -> None:
    v = decide(daemon(), G1, [mount(T - 60)], qemu_conf.Conf(None, T + 30), "8G")
    assert not v.sees and "started before /etc/libvirt/qemu.conf last changed" in v.said


def test_a_daemon_vmharness_started_is_marked_for_a_restart() -> None:
    v = decide(daemon(owned=True), G1, [mount(T + 5)], NO_CONF, "8G")
    assert not v.sees and v.owned and "vmharness started it: it is restarted before a guest starts" in v.said


# the facts, read from a /proc tree --------------------------------------------------------------
def _proc(host: FakeHost, pid: int, comm: str, start_ticks: int, cgroup: str = "0::/", uid: int = 0,
          cmdline: str = "") -> None:
    host.write(f"proc/{pid}/comm", comm + "\n")
    host.write(f"proc/{pid}/stat", f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 " + "0 " * 12
               + f"{start_ticks} 1000 100\n")
    host.write(f"proc/{pid}/cgroup", cgroup + "\n")
    host.write(f"proc/{pid}/status", f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    host.write(f"proc/{pid}/cmdline", (cmdline or comm).replace(" ", "\0") + "\0")


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    h = FakeHost(tmp_path / "host")
    h.finish()
    return h


def _live(host: FakeHost) -> HostRoot:
    root = HostRoot(host.base)
    root.live = True  # judge() reads the live host only; this tree stands in for one
    return root


def test_the_daemon_is_read_from_proc_with_its_start_unit_and_command(host: FakeHost) -> None:
    _proc(host, 812, "virtqemud", 4200, "0::/system.slice/virtqemud.service",
          cmdline="/usr/sbin/virtqemud --timeout 120")
    d = driver_daemon.read_daemon(HostRoot(host.base), 812, 1000.0, None)
    assert d == driver_daemon.Daemon(812, "virtqemud", 1000.0 + 4200 / os.sysconf("SC_CLK_TCK"),
                          ("/usr/sbin/virtqemud", "--timeout", "120"), "virtqemud.service", False)
    assert driver_daemon.read_daemon(HostRoot(host.base), 812, 1000.0, 812).owned  # type: ignore[union-attr]
    assert driver_daemon.read_daemon(HostRoot(host.base), 999, 1000.0, None) is None, "gone"


def test_the_driver_pid_file_names_the_daemon_among_several(host: FakeHost) -> None:
    _proc(host, 700, "libvirtd", 100)
    _proc(host, 812, "virtqemud", 200)
    host.write("run/libvirt/qemu/driver.pid", "812\n")
    assert driver_daemon.daemon_pids(HostRoot(host.base)) == [812]


def test_several_daemons_and_no_driver_pid_are_refused(host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(libvirtd.ENV, raising=False)
    _proc(host, 700, "libvirtd", 100)
    _proc(host, 812, "virtqemud", 200)
    _proc(host, 900, "libvirtd", 300, uid=1000)  # a user's session daemon does not start root's guests
    v = lh.judge(_live(host), G1, "8G")
    assert v is not None and not v.sees
    assert v.said.startswith("several libvirt daemons run (libvirtd[700], virtqemud[812])")


def test_no_daemon_running_says_nothing(host: FakeHost) -> None:
    assert lh.judge(_live(host), G1, "8G") is None
    assert lh.judge(HostRoot(host.base), G1, "8G") is None, "a snapshot that recorded nothing"


def test_the_live_judgement_reads_mounts_and_qemu_conf(host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(libvirtd.ENV, raising=False)
    host.write("proc/meminfo", "Hugepagesize:       2048 kB\n")
    host.mount("vmharness /run/vmharness/hugepages-1G hugetlbfs rw,relatime,pagesize=1024M 0 0")
    host.mkdir("run/vmharness/hugepages-1G/libvirt/qemu")
    host.write("etc/libvirt/qemu.conf", '# hugetlbfs_mount = "/dev/hugepages"\nuser = "root"\n')
    os.utime(host.p("etc/libvirt/qemu.conf"), (1.0, 1.0))
    _proc(host, 812, "libvirtd", 10)
    v = lh.judge(_live(host), G1, "8G")
    assert v is not None and v.sees and "its libvirt/qemu directory is there" in v.said
    host.write("etc/libvirt/qemu.conf", 'hugetlbfs_mount = "/dev/hugepages"\n')
    os.utime(host.p("etc/libvirt/qemu.conf"), (1.0, 1.0))
    v = lh.judge(_live(host), G1, "8G")
    assert v is not None and not v.sees and "qemu.conf names (/dev/hugepages)" in v.said


def test_a_snapshot_answers_as_its_host_did(host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """host-snapshot keeps the facts among its probes: --dry-run on the snapshot says the same line."""
    monkeypatch.delenv(libvirtd.ENV, raising=False)
    host.mount("vmharness /run/vmharness/hugepages-1G hugetlbfs rw,relatime,pagesize=1024M 0 0")
    host.mkdir("run/vmharness/hugepages-1G")
    _proc(host, 812, "libvirtd", 10, cmdline="libvirtd -d")
    live = lh.judge(_live(host), G1, "8G")
    assert live is not None and not live.sees
    host.write("vmharness-probes.json", json.dumps({"libvirt": lh.measure(_live(host))}))
    assert lh.judge(HostRoot(host.base), G1, "8G") == live


@pytest.mark.parametrize(("entry", "what"), [
    ([1], "not an object"),
    ({"daemon": None, "several": "libvirtd[1]"}, "several"),
    ({"daemon": {"pid": "812", "name": "libvirtd", "started": 1.0, "argv": [], "unit": None},
      "conf": {"paths": None, "mtime": 0}, "mounts": {}}, "daemon"),
    ({"daemon": {"pid": 812, "name": "libvirtd", "started": 1.0, "argv": ["a", 2], "unit": None},
      "conf": {"paths": None, "mtime": 0}, "mounts": {}}, "daemon"),
    ({"daemon": {"pid": 812, "name": "libvirtd", "started": 1.0, "argv": [], "unit": None},
      "conf": {"paths": "/dev/hugepages", "mtime": 0}, "mounts": {}}, "conf"),
    ({"daemon": {"pid": 812, "name": "libvirtd", "started": 1.0, "argv": [], "unit": None}, "mounts": {}}, "conf"),
    ({"daemon": {"pid": 812, "name": "libvirtd", "started": 1.0, "argv": [], "unit": None},
      "conf": {"paths": None, "mtime": 0}, "mounts": {"/dev/hugepages": [True, "yes"]}}, "mounts"),
])
def test_a_damaged_libvirt_entry_in_a_snapshot_is_one_error_naming_it(host: FakeHost, entry: Any, what: str) -> None:
    host.write("vmharness-probes.json", json.dumps({"libvirt": entry}))
    with pytest.raises(HarnessError) as err:
        lh.judge(HostRoot(host.base), G1, "8G")
    assert_one_line_error(err.value.render())
    assert err.value.message.startswith("/vmharness-probes.json in the host root holds a damaged libvirt entry")
    assert f"({what})" in err.value.message


# qemu.conf and VMHARNESS_LIBVIRTD, as found -------------------------------------------------------
@pytest.mark.parametrize(("text", "paths"), [
    ("", None),
    ('#hugetlbfs_mount = "/dev/hugepages"\n', None),
    ('hugetlbfs_mount = "/dev/hugepages"\n', ("/dev/hugepages",)),
    ("hugetlbfs_mount = '/dev/hugepages' # the default\n", ("/dev/hugepages",)),
    ('hugetlbfs_mount = ["/dev/hugepages", "/dev/hugepages1G"]\n', ("/dev/hugepages", "/dev/hugepages1G")),
    ('hugetlbfs_mount = [\n  "/a",  # two\n  "/b",\n]\nuser = "root"\n', ("/a", "/b")),
    ("hugetlbfs_mount = []\n", ()),
])
def test_qemu_conf_values_are_read(text: str, paths: tuple[str, ...] | None) -> None:
    assert qemu_conf.parse_conf(text) == paths


@pytest.mark.parametrize("text", [
    "hugetlbfs_mount = \n\"/dev/hugepages\"\n",  # no value on its line
    "hugetlbfs_mount = /dev/hugepages\n",  # unquoted
    'hugetlbfs_mount = "dev/hugepages"\n',  # relative
    'hugetlbfs_mount = ["/a" "/b"]\n',  # no comma
    'hugetlbfs_mount = ["/a", , "/b"]\n',
    'hugetlbfs_mount = ["/a",\n',  # never closed
    "hugetlbfs_mount = [1, 2]\n",
    'hugetlbfs_mount = "/a\n',  # unterminated string
    'hugetlbfs_mount = "/a"\nhugetlbfs_mount = "/b"\n',  # twice
    "hugetlbfs_mount = $(touch /tmp/vmh-hostile-pwned)\n",
])
def test_a_damaged_qemu_conf_is_one_error_naming_it(text: str) -> None:
    with pytest.raises(HarnessError) as err:
        qemu_conf.parse_conf(text)
    assert_one_line_error(err.value.render())
    assert "/etc/libvirt/qemu.conf" in err.value.message
    assert not Path("/tmp/vmh-hostile-pwned").exists()


@pytest.mark.parametrize("value", ["", "812", "812:3:4", "a:b:c:d:e", "812:3:4:5:6:7", "-1:3:4:5:6",
                                   "812:3:99999999999999999999999:4:5", "1;touch /tmp/x:3:4:5:6"])
def test_a_hostile_vmharness_libvirtd_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(libvirtd.ENV, value)
    with pytest.raises(HarnessError) as err:
        libvirtd.owned_pid()
    assert_one_line_error(err.value.render())
    assert libvirtd.ENV in err.value.message


def test_vmharness_libvirtd_naming_other_files_claims_no_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child of the wrapped command inherits the variable but not its pipes: the numbers may name
    other files there, which are never written to."""
    read, write = os.pipe()
    try:
        monkeypatch.setenv(libvirtd.ENV, f"812:{write}:1:{read}:1")  # the wrong inodes
        assert libvirtd.owned_pid() is None
        monkeypatch.setenv(libvirtd.ENV, f"812:{write}:{os.fstat(write).st_ino}:{read}:{os.fstat(read).st_ino}")
        assert libvirtd.owned_pid() == 812
    finally:
        os.close(read)
        os.close(write)


def test_the_wrapped_command_asks_the_wrapper_for_restarts_and_learns_each_new_pid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol between `python -m vmharness.host.libvirt.daemon` and its command, through a shell as the
    rig uses it; the restart itself (libvirtd stopped and started) is the rig's test_hugepages_1g.py."""

    class Started:
        def __init__(self, pid: int) -> None:
            self.pid = pid

    def restart(started: list[Started]) -> int:
        if started[-1].pid == 102:
            raise HarnessError("the libvirtd vmharness started runs 1 guest(s): it is not restarted under them")
        started[-1] = Started(started[-1].pid + 1)
        return started[-1].pid

    monkeypatch.setattr(libvirtd, "_restart", restart)
    started = [Started(1), Started(100)]
    asks, ask = os.pipe()
    answer, answers = os.pipe()
    busy = threading.Lock()
    threading.Thread(target=libvirtd._serve, args=(started, busy, asks, answers), daemon=True).start()
    env = {**os.environ, libvirtd.ENV: f"100:{ask}:{os.fstat(ask).st_ino}:{answer}:{os.fstat(answer).st_ino}"}
    code = ("from vmharness.errors import HarnessError\nfrom vmharness.host.libvirt import daemon as l\n"
            "print(l.owned_pid(), l.restart_owned(), l.restart_owned(), l.owned_pid())\n"
            "try:\n    l.restart_owned()\nexcept HarnessError as e:\n    print(e.message)\n")
    try:
        res = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$1"', "sh", code], env=env, pass_fds=(ask, answer),
                             capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.close(ask)
        os.close(answer)
    with busy:
        assert started[-1].pid == 102
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["100 101 102 102", "the libvirtd vmharness started was not restarted: the "
                                       "libvirtd vmharness started runs 1 guest(s): it is not restarted under them"]
