"""What reaches ssh: a destination that ssh could read as an option is refused before ssh runs, `--`
ends ssh's options before the destination, and the remote command runs in the C locale. Also the
local side of the same promise: proc pins the locale and says how a child ended."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from vmharness.errors import HarnessError
from vmharness.system import machine, proc
from vmharness.system.machine import SSH_CONFIG_ENV, Machine, check_destination, for_uri
from vmharness.tune.access import from_spec, ssh_target
from vmharness.userfile import MAX_READ

HOSTILE = ("-oProxyCommand=touch /tmp/PWNED", "-F/etc/passwd", "-", "", "host name", "host\nname", "a\x00b")


@pytest.mark.parametrize("dest", HOSTILE)
def test_a_destination_ssh_could_misread_is_refused_naming_where_it_came_from(dest: str) -> None:
    with pytest.raises(HarnessError) as e:
        check_destination(dest, "[[client]] host")
    assert "[[client]] host" in e.value.message and "\n" not in e.value.message.replace(repr(dest), "")


@pytest.mark.parametrize("dest", ["server1", "root@server1", "user@10.0.0.1", "a-b.example", "ssh://u@h:2222"])
def test_ordinary_destinations_pass(dest: str) -> None:
    assert check_destination(dest, "x") == dest
    assert Machine(dest).ssh == dest


def test_a_machine_cannot_be_made_with_an_option_for_a_destination() -> None:
    with pytest.raises(HarnessError, match="starts with '-'"):
        Machine("-oProxyCommand=id")
    with pytest.raises(HarnessError, match="machine client1"):
        Machine("-x", name="client1")
    with pytest.raises(HarnessError, match="client"):
        ssh_target("-oProxyCommand=id")
    with pytest.raises(HarnessError, match="starts with '-'"):
        from_spec({"kind": "ssh", "ssh": "-oProxyCommand=id"}, None)  # type: ignore[arg-type]


def test_a_libvirt_uri_host_that_is_an_option_is_refused() -> None:
    with pytest.raises(HarnessError, match="libvirt URI qemu\\+ssh://-oProxyCommand=x/system"):
        for_uri("qemu+ssh://-oProxyCommand=x/system")
    with pytest.raises(HarnessError, match="starts with '-'"):
        for_uri("qemu+ssh://-x@host/system")
    with pytest.raises(HarnessError, match="malformed"):
        for_uri("qemu+ssh://[::1/system")
    assert for_uri("qemu+ssh://root@server1/system") == Machine("root@server1")
    assert for_uri("qemu+ssh://root@server1:2222/system") == Machine("ssh://root@server1:2222")
    with pytest.raises(HarnessError, match="malformed"):
        for_uri("qemu+ssh://server1:port/system")
    assert for_uri("qemu:///system").local


def test_the_destination_follows_the_end_of_options_and_the_command_runs_in_the_c_locale(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SSH_CONFIG_ENV, raising=False)
    argv = Machine("h", ("-i", "/k")).argv(["cat", "a b", "$(id)"])
    assert argv == ["ssh", "-i", "/k", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", "h",
                    "env LC_ALL=C cat 'a b' '$(id)'"]
    assert argv.index("--") == argv.index("h") - 1
    assert Machine().argv(["cat", "a b"]) == ["cat", "a b"]


def test_a_hostile_destination_never_reaches_the_real_ssh(tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    hostile = f"-oProxyCommand=touch {pwned}"
    with pytest.raises(HarnessError) as e:
        Machine(hostile).run(["true"], timeout=10)
    assert len(e.value.render().splitlines()) == 2
    assert not pwned.exists()


def test_with_the_end_of_options_the_real_ssh_takes_an_option_like_name_as_a_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a destination that got past the check is not an option to ssh: the argv Machine builds,
    run by the real ssh. A config file gives every host a ProxyCommand that fails at once, so no
    name is looked up and nothing leaves this machine; an option given on the command line would win
    over it (ssh takes the first value it is given) and create the file."""
    pwned = tmp_path / "PWNED"
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  ProxyCommand /bin/false\n  BatchMode yes\n")
    monkeypatch.setenv(SSH_CONFIG_ENV, str(config))
    m = Machine("h")
    hostile = f"-oProxyCommand=touch {pwned}"
    object.__setattr__(m, "ssh", hostile)  # past the check, as a bug might let it
    res = proc.run(m.argv(["true"]), timeout=30, check=False)
    assert res.returncode == 255, res
    assert not pwned.exists(), "ssh read the destination as an option"
    argv = m.argv(["true"])
    cut = argv.index("--")
    proc.run([*argv[:cut], hostile, "--", "true"], timeout=30, check=False)  # the old argv: the file is created
    assert pwned.exists(), "the test's hostile destination would not have worked anyway"


def test_children_run_in_the_c_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LANGUAGE", "de")
    out = proc.run(["sh", "-c", 'echo "$LC_ALL ${LANGUAGE-unset}"'], timeout=10).stdout
    assert out.split() == ["C", "unset"]
    assert proc.run(["sh", "-c", 'echo "$X"'], timeout=10, env={"X": "1"}).stdout == "1\n"


def test_a_failure_says_how_the_child_ended() -> None:
    killed = proc.run(["sh", "-c", "kill -KILL $$"], timeout=10, check=False)
    assert killed.returncode == -signal.SIGKILL
    assert "(killed by SIGKILL)" in killed.failure().message
    missing = proc.run(["sh", "-c", "no-such-program-here"], timeout=10, check=False)
    assert "(not found (exit 127))" in missing.failure().message
    assert "(exit 3)" in proc.Result(("x",), 3, "", "why").failure().message
    assert "killed by signal 99" in proc.Result(("x",), -99, "", "").failure().message


def test_output_that_is_not_utf8_is_read_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "bin").write_bytes(b"ok \xff\xfe\n")
    assert proc.run(["cat", str(tmp_path / "bin")], timeout=10).stdout.startswith("ok ")


def test_remote_reads_of_process_state_go_through_the_one_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(self: Machine, argv: list[str], *, timeout: float, check: bool = True,
                 input: str | None = None) -> proc.Result:
        seen.append(list(argv))
        return proc.Result(tuple(argv), 0, "1 (nginx: worker) S 1 1 1 0 -1 " + "0 " * 13 + "12345\n", "")

    monkeypatch.setattr(Machine, "run", fake_run)
    assert machine.start_time(Machine("h"), 1) is not None
    assert seen and seen[0][:2] == ["sh", "-c"] and seen[0][-2:] == ["/proc/1/stat", str(MAX_READ + 1)]


SS_LINK_ONLY = "LISTEN 0      128       198.18.1.2:22        0.0.0.0:*\n"
SS_EVERYWHERE = ("LISTEN 0      128          0.0.0.0:22        0.0.0.0:*\n"
                 "LISTEN 0      128             [::]:22           [::]:*\n")


def test_sshd_in_the_guest_must_listen_on_the_management_link_alone(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    from vmharness.guest import agent, ssh

    monkeypatch.setattr(ssh, "KEY_DIR", tmp_path / "ssh")
    monkeypatch.setattr(ssh, "KEY", tmp_path / "ssh" / "id_ed25519")  # made here, not in /var/lib/vmharness
    assert ssh.listeners(SS_EVERYWHERE) == ["0.0.0.0:22", "[::]:22"]
    ran: list[list[str]] = []
    given: list[bytes | None] = []
    answer = {"out": SS_LINK_ONLY}

    def fake_run(dom: object, argv: list[str], timeout: float = 60, input: bytes | None = None) -> proc.Result:
        ran.append(argv)
        given.append(input)
        return proc.Result(tuple(argv), 0, answer["out"], "")

    monkeypatch.setattr(agent, "run", fake_run)
    ssh.listen(None, "198.18.1.2/24", "eth0")
    assert ran[0][:2] == ["/bin/sh", "-c"] and ran[0][-3:] == ["198.18.1.2", "198.18.1.2/24", "eth0"]  # data
    # the harness's public key, to root's authorized_keys in the same command
    assert given == [(tmp_path / "ssh" / "id_ed25519.pub").read_bytes()]
    assert given[0] is not None and given[0].startswith(b"ssh-ed25519 ")
    for out, shown in ((SS_EVERYWHERE, "0.0.0.0:22, [::]:22"), ("", "nothing"),
                       (SS_LINK_ONLY + "LISTEN 0 128 198.19.0.2:22 0.0.0.0:*\n", "198.18.1.2:22, 198.19.0.2:22")):
        answer["out"] = out
        with pytest.raises(HarnessError, match=f"sshd in the guest listens on {re.escape(shown)}, not on "
                                               "198.18.1.2:22 alone"):
            ssh.listen(None, "198.18.1.2/24", "eth0")
    monkeypatch.setattr(agent, "run", lambda dom, argv, timeout=60, input=None: proc.Result(
        tuple(argv), 12, "", "mkdir: cannot create directory '/root/.ssh': Read-only file system"))
    with pytest.raises(HarnessError, match="in the guest, authorizing the harness's key failed: mkdir: cannot"):
        ssh.listen(None, "198.18.1.2/24", "eth0")
