"""`run --print-xml` and `host-prepare --dry-run --config` show each host boot a configuration's
instances name (experiment/hostboots/show.py): what it would boot (its kernel's release and sha256),
the kexec command that would load it, the rounds, the way home, whether kexec can work on the host, and
what a reboot would end; on a host root (a snapshot), changing nothing there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import hostboot_kit
from tests.fakehost import FakeHost
from vmharness.cli import main as cli

RELEASE = "7.3.4+deb13-amd64"


def _setup(tmp_path: Path, kexec: bool = True) -> tuple[FakeHost, Path, str]:
    h = FakeHost(tmp_path / "root", nodes=1, cpus_per_node=2)
    files = {"proc/sys/kernel/osrelease": "6.1.0-18-amd64\n", "proc/cmdline": "BOOT_IMAGE=/v root=/dev/vda ro\n"}
    if kexec:
        files |= {"sys/kernel/kexec_loaded": "0\n", "usr/sbin/kexec": ""}
    for rel, text in files.items():
        (h.base / rel).parent.mkdir(parents=True, exist_ok=True)
        (h.base / rel).write_text(text)
    k = hostboot_kit.kernel(hostboot_kit.trusted(f"hostboot-show-{tmp_path.name}"), RELEASE)
    study = tmp_path / "r.toml"
    study.write_text(f'[guest]\naccel = "tcg"\n[[host_boot]]\nname = "v2off"\nkernel = "{k.path}"\n'
                     'cmdline = "spectre_v2=off"\n[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n'
                     'host_boot = "v2off"\n')
    return h, study, k.path


def _tree(base: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_host_prepare_dry_run_shows_each_host_boot_and_what_kexec_would_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h, study, kernel = _setup(tmp_path)
    before = _tree(h.base)
    assert cli.main(["host-prepare", "--dry-run", "--hugepages", "64M", "--host-root", str(h.base),
                     "--config", str(study)]) == 0
    out = capsys.readouterr().out
    assert (f"  host boot v2off (instances b): kernel {RELEASE} (sha256 " in out and
            f"would load: /usr/sbin/kexec -l {kernel} '--append=root=/dev/vda ro spectre_v2=off'\n" in out)
    assert "  order: round 1: the boot the run started in (a); round 1: v2off (b); round 2: v2off (b);" in out
    assert "  kexec: /usr/sbin/kexec\n" in out
    assert _tree(h.base) == before
    assert cli.main(["host-prepare", "--dry-run", "--hugepages", "64M", "--host-root", str(h.base),
                     "--config", str(study), "--json"]) == 0
    boots = json.loads(capsys.readouterr().out)["host_boots"]
    assert boots[0].startswith("host boot v2off (instances b)") and boots[-2] == "kexec: /usr/sbin/kexec"


def test_run_print_xml_shows_them_and_says_where_kexec_cannot_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h, study, kernel = _setup(tmp_path, kexec=False)
    assert cli.main(["run", str(study), "--print-xml", "--host-root", str(h.base)]) == 0
    out = capsys.readouterr().out
    assert "host boots (run makes them with --allow-host-reboot, rebooting the host between them):" in out
    assert f"would load: kexec -l {kernel} '--append=root=/dev/vda ro spectre_v2=off'" in out
    assert "  kexec cannot work here: host boots need kexec, and this kernel has none" in out


def test_a_configuration_without_host_boots_shows_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h, study, _ = _setup(tmp_path)
    study.write_text('[guest]\naccel = "tcg"\n[[instance]]\nname = "a"\n')
    assert cli.main(["run", str(study), "--print-xml", "--host-root", str(h.base)]) == 0
    assert "host boot" not in capsys.readouterr().out


def test_a_host_boot_no_instance_names_is_said_not_booted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `host_boot` forgotten in an instance would leave its [[host_boot]] unbooted without a word."""
    h, study, kernel = _setup(tmp_path)
    spare = f'[[host_boot]]\nname = "spare"\nkernel = "{kernel}"\n'
    study.write_text(study.read_text() + spare)
    assert cli.main(["run", str(study), "--print-xml", "--host-root", str(h.base)]) == 0
    out = capsys.readouterr().out
    assert "  host boot v2off (instances b): " in out
    assert "  host boot spare: no instance runs under it, so the run does not boot it\n" in out
    study.write_text(f'[guest]\naccel = "tcg"\n[[instance]]\nname = "a"\n{spare}')
    assert cli.main(["run", str(study), "--print-xml", "--host-root", str(h.base)]) == 0
    out = capsys.readouterr().out
    assert ("host boots: none the run would make (run makes them with --allow-host-reboot, rebooting the host "
            "between them)\n  host boot spare: no instance runs under it, so the run does not boot it\n") in out
