"""Bad input: one line saying what, one hint, exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.errors import HarnessError
from vmharness.system.root import HostRoot


def assert_one_line_error(result: tuple[int, str, str], *needles: str) -> None:
    code, out, err = result
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)


def test_malformed_bdf(cli, host: FakeHost) -> None:
    assert_one_line_error(cli("host-groups", "--host-root", str(host.base), "--bdf", "b3:0.0"),
                          "not a PCI address")


def test_unknown_bdf(cli, host: FakeHost) -> None:
    assert_one_line_error(cli("host-groups", "--host-root", str(host.base), "--bdf", "0000:b3:00.0"),
                          "no PCI device 0000:b3:00.0")


def test_unknown_class(cli, host: FakeHost) -> None:
    assert_one_line_error(cli("host-groups", "--host-root", str(host.base), "--class", "toasters"),
                          "unknown device class")


def test_host_root_not_a_directory(cli, tmp_path: Path) -> None:
    assert_one_line_error(cli("host-check", "--host-root", str(tmp_path / "nope")), "is not a directory")


def test_host_root_not_laid_out_like_root(cli, tmp_path: Path) -> None:
    assert_one_line_error(cli("host-check", "--host-root", str(tmp_path)), "has no sys/ directory")


def test_host_root_from_environment(cli, host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    host.pci("0000:00:03.0", driver="e1000e", group=3)
    monkeypatch.setenv("VMHARNESS_HOST_ROOT", str(host.base))
    data = cli.json("host-groups")
    assert [g["group"] for g in data["groups"]] == [3]


def test_missing_sysfs_attribute(cli, host: FakeHost) -> None:
    d = host.pci("0000:00:03.0", driver="e1000e", group=3)
    (host.base / d / "class").unlink()
    assert_one_line_error(cli("host-groups", "--host-root", str(host.base)), "/class is missing")


def test_no_permission(cli, host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    host.pci("0000:00:03.0", driver="e1000e", group=3)

    def denied(*a: object, **k: object) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("vmharness.system.root.read_file", denied)
    assert_one_line_error(cli("host-groups", "--host-root", str(host.base)), "no permission", "root")


def test_unknown_option_and_command(cli) -> None:
    assert_one_line_error(cli("host-check", "--frobnicate"), "unrecognized arguments")
    assert_one_line_error(cli("host-chekc"), "invalid choice")


def test_writes_refused_off_the_live_host(host: FakeHost) -> None:
    with pytest.raises(HarnessError) as e:
        HostRoot(host.base).write_text("/sys/bus/pci/drivers_probe", "0000:00:03.0")
    assert "not the live host" in e.value.message
    HostRoot(host.base, allow_writes=True).write_text("/tmp-note", "ok")
    assert (host.base / "tmp-note").read_text() == "ok"


def test_symlink_escaping_the_root_is_refused(host: FakeHost) -> None:
    (host.base / "sys/bus/pci/devices/0000:00:09.0").symlink_to("/sys/devices")
    with pytest.raises(HarnessError, match="outside host root"):
        HostRoot(host.base).realpath("/sys/bus/pci/devices/0000:00:09.0")
