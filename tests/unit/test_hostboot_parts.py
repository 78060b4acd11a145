"""The pure parts of host boots: the rotating plan of rounds (experiment/hostboots/plan.py), the command
line a host boot gives its kernel (target.py), the checks before anything is taken over a fake host
root (checks.py: kexec support, lockdown, consent and what a reboot ends, from utmp and SSH_CONNECTION),
the state file read back (state.py), and the journal op of a loaded kernel (kexec.py), whose undo is
`kexec -u` through the process helper (faked here: nothing in this file runs kexec)."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests import hostboot_kit
from tests.hostboot_kit import BootingHost
from vmharness.errors import HarnessError
from vmharness.experiment import ops
from vmharness.experiment.hostboots import checks, kexec, plan, state, target
from vmharness.host.inspect import boot_file, logins
from vmharness.host.inspect.net import ssh_route
from vmharness.journal import journal, restore
from vmharness.model import config
from vmharness.model.hostboots import HostBootSection
from vmharness.model.sections import RunConfig
from vmharness.system import proc
from vmharness.system.root import HostRoot

assert ops.REGISTRARS


def _cfg(tmp: Path, instances: str, iterations: int = 3) -> RunConfig:
    path = tmp / "c.toml"
    path.write_text(f'[sweep]\niterations = {iterations}\n[[host_boot]]\nname = "x"\nkernel = "/boot/k"\n'
                    f'[[host_boot]]\nname = "y"\nkernel = "/boot/k"\n{instances}')
    return config.load_run(path)


def test_each_round_visits_each_host_boot_once_in_a_rotated_order(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, '[[instance]]\nname = "a"\n[[instance]]\nname = "b"\nhost_boot = "x"\n'
               '[[instance]]\nname = "c"\nhost_boot = "y"\n[[instance]]\nname = "d"\nhost_boot = "x"\n')
    stops = plan.stops(cfg)
    assert [(s.round, s.boot) for s in stops] == [(0, ""), (0, "x"), (0, "y"), (1, "x"), (1, "y"), (1, ""),
                                                 (2, "y"), (2, ""), (2, "x")]
    # the instances of a host boot in the round's instance order (bench/plan.py order, rotated each round)
    assert [s.instances for s in stops if s.boot == "x"] == [("b", "d"), ("b", "d"), ("d", "b")]
    assert plan.switches(cfg) == 8 + 0 + 1  # a kexec between stops, none before the first, one home


def test_a_run_that_never_uses_its_own_boot_switches_first_and_comes_home(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, '[[instance]]\nname = "a"\nhost_boot = "y"\n', iterations=2)
    assert [(s.round, s.boot) for s in plan.stops(cfg)] == [(0, "y"), (1, "y")]  # x is named by none: not booted
    assert plan.switches(cfg) == 1 + 1 + 1
    assert plan.needs_host_boots(cfg)
    assert not plan.needs_host_boots(_cfg(tmp_path, '[[instance]]\nname = "a"\n'))


@pytest.mark.parametrize(("mode", "running", "want"), [
    ("add", "BOOT_IMAGE=/boot/vmlinuz-6.1 root=/dev/vda initrd=/i ro", "root=/dev/vda ro spectre_v2=off"),
    ("add", "root=/dev/vda rdinit=/x -- --init-arg", "root=/dev/vda rdinit=/x spectre_v2=off -- --init-arg"),
    ("replace", "BOOT_IMAGE=/boot/vmlinuz-6.1 root=/dev/vda", "root=/dev/vda spectre_v2=off"),
])
def test_the_command_line_a_host_boot_gives_its_kernel(mode: str, running: str, want: str) -> None:
    line = "root=/dev/vda spectre_v2=off" if mode == "replace" else "spectre_v2=off"
    boot = HostBootSection("x", "/boot/k", cmdline=line, cmdline_mode=mode)  # type: ignore[arg-type]
    assert target.compose(boot, running, "w") == want


@pytest.mark.parametrize(("mode", "line", "running", "said"), [
    ("add", "root=/dev/sdb1", "root=/dev/vda ro", "it would boot with root='/dev/sdb1', and the host runs with "
                                                   "root='/dev/vda'"),
    ("add", "nfsroot=198.18.0.9:/srv", "root=/dev/vda", "with nfsroot='198.18.0.9:/srv', and the host runs with no"),
    ("replace", "spectre_v2=off", "root=/dev/vda", "with no root=, and the host runs with root='/dev/vda'"),
    ("replace", "root=/dev/vdb spectre_v2=off", "root=/dev/vda", "root='/dev/vdb'"),
])
def test_a_host_boot_on_another_root_file_system_is_refused(mode: str, line: str, running: str, said: str) -> None:
    """Another root file system starts its own init: a program of the configuration's choosing."""
    boot = HostBootSection("x", "/boot/k", cmdline=line, cmdline_mode=mode)  # type: ignore[arg-type]
    with pytest.raises(HarnessError, match="another root file system") as refused:
        target.compose(boot, running, "config.host_boot[0]")
    assert said in str(refused.value)


def test_a_composed_command_line_over_the_kernels_size_is_refused() -> None:
    boot = HostBootSection("x", "/boot/k", cmdline="a" * 1500)
    with pytest.raises(HarnessError, match="the kernel keeps 2047"):
        target.compose(boot, "b" * 1000, "config.host_boot[0]")


def test_the_kexec_command_is_an_argv_never_a_shell_line(tmp_path: Path) -> None:
    folder = hostboot_kit.trusted(f"hostboot-argv-{tmp_path.name}")
    k = hostboot_kit.kernel(folder, "6.1.0-18-amd64")
    t = target.Target("x", k, k, "root=/dev/vda spectre_v2=off")
    assert t.kexec_argv("/usr/sbin/kexec") == ["/usr/sbin/kexec", "-l", k.path, f"--initrd={k.path}",
                                               "--append=root=/dev/vda spectre_v2=off"]
    assert boot_file.release_of(hostboot_kit.bzimage("7.3.4+deb13-amd64")) == "7.3.4+deb13-amd64"
    assert boot_file.release_of(b"\x7fELF" + bytes(0x300)) is None


def _root(tmp: Path, files: Mapping[str, str | bytes]) -> HostRoot:
    for rel, content in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (tmp / rel).write_bytes(content)
        else:
            (tmp / rel).write_text(content)
    (tmp / "proc").mkdir(exist_ok=True)
    return HostRoot(tmp)


@pytest.mark.parametrize(("files", "needle"), [
    ({}, "this kernel has none"),
    ({checks.KEXEC_LOADED: "0\n"}, "kexec-tools' kexec, and it is not installed"),
    ({checks.KEXEC_LOADED: "0\n", "usr/sbin/kexec": "", checks.LOCKDOWN: "none [integrity] confidentiality\n"},
     "locked down (integrity)"),
    ({checks.KEXEC_LOADED: "0\n", "usr/sbin/kexec": "", checks.LOCKDOWN: "none integrity [confidentiality]\n"},
     "locked down (confidentiality)"),
    ({checks.KEXEC_LOADED: "0\n", "usr/sbin/kexec": "", checks.LOCKDOWN: "[bogus]\n"}, "not a lockdown mode"),
])
def test_where_kexec_cannot_work_the_run_is_refused_with_the_reason(tmp_path: Path, files: dict[str, str],
                                                                    needle: str) -> None:
    with pytest.raises(HarnessError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        checks.check_kexec(_root(tmp_path, files))


def test_kexec_that_can_work_is_found(tmp_path: Path) -> None:
    root = _root(tmp_path, {checks.KEXEC_LOADED: "0\n", "sbin/kexec": "", checks.LOCKDOWN: "[none] integrity\n"})
    assert checks.check_kexec(root) == "/sbin/kexec"


def _utmp(*entries: tuple[int, int, str, str, str]) -> bytes:
    rec = struct.Struct("<hxxi32s4s32s256shhiii4i20s")
    return b"".join(rec.pack(kind, pid, line.encode(), b"", user.encode(), host.encode(), 0, 0, 0, 0, 0,
                             0, 0, 0, 0, b"") for kind, pid, line, user, host in entries)


def test_what_a_reboot_ends_is_said_and_without_the_flag_the_run_refuses(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = _utmp((7, 4242, "pts/0", "alice", "192.0.2.7"), (7, 999999, "pts/1", "gone", ""),
                 (8, 4243, "pts/2", "dead", ""), (7, 4244, "tty1", "bob\x1b[2J", ""))
    root = _root(tmp_path, {"run/utmp": data + b"torn", "proc/4242/stat": "", "proc/4244/stat": ""})
    assert [str(s) for s in logins.sessions(root)] == ["alice on pts/0 from 192.0.2.7 (pid 4242)",
                                                       "bob\\x1b[2J on tty1 (pid 4244)"]
    monkeypatch.setattr(ssh_route, "session", lambda _root: "192.0.2.7 50000 192.0.2.1 22")
    ends = checks.reboot_ends(root, ["someone-elses-guest"])
    assert ends[2] == "the libvirt guest someone-elses-guest" and ends[3].startswith("this SSH session (192.0.2.7")
    with pytest.raises(HarnessError, match=r"reboots the host 3 times.*alice on pts/0") as exc:
        checks.consent(False, ends, 3)
    assert exc.value.hint is not None and checks.FLAG in exc.value.hint
    checks.consent(True, ends, 3)


@pytest.mark.parametrize("data", [b"{", b"[]", b'{"run": 1}', b"\xff" * 10])
def test_a_damaged_state_file_is_refused_never_guessed_at(data: bytes) -> None:
    with pytest.raises(HarnessError, match="is damaged"):
        state.parse(data, "state.json")


def test_the_state_file_reads_back_and_is_never_written_through_a_link(tmp_path: Path) -> None:
    store = state.Store(tmp_path)
    s = state.State(run="r", next=2, phase="switching", expected="x")
    store.save(s)
    assert store.load() == s
    (tmp_path / state.FOLDER / state.NAME).unlink()
    (tmp_path / state.FOLDER / state.NAME).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(HarnessError, match="symlink"):
        store.save(s)
    assert not (tmp_path / "elsewhere").exists()


def test_a_loaded_kernel_is_journaled_before_it_is_loaded_and_host_restore_unloads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = BootingHost(tmp_path / "host")
    folder = hostboot_kit.trusted(f"hostboot-journal-{tmp_path.name}")
    t = target.Target("x", hostboot_kit.kernel(folder, "7.3.4+deb13-amd64"), None, "spectre_v2=off")

    class Dies:
        def load(self, argv: list[str]) -> None:
            assert journal.read(host.root)[-1]["op"] == "kexec"
            raise KeyboardInterrupt  # killed between the record and kexec -e

        def unload(self) -> None: ...

        def execute(self) -> None: ...

    with pytest.raises(KeyboardInterrupt):
        kexec.load(host.root, Dies(), t, "/usr/sbin/kexec", "run:test")
    [rec] = journal.outstanding(journal.read(host.root))
    assert journal.OPS[rec["op"]].describe(rec).startswith("a kernel loaded for the host boot x")
    ran: list[list[str]] = []
    monkeypatch.setattr(proc, "run", lambda argv, **_kw: ran.append(argv))
    assert journal.OPS["kexec"].undo(HostRoot("/"), rec) == []  # type: ignore[misc]
    assert ran == [["kexec", "-u"]]
    assert restore.undo(host.root, lambda _s: None) == [] and ran == [["kexec", "-u"]]  # off the live host: no kexec
