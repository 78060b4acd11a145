"""`qemu`, a guest's own QEMU binary: the value's form (model/emulator.py), the file and the QEMU it must
be (host/inspect/qemu_binary.py, asked of this machine's QEMU and of fakes, tests/qemu_kit.py), each
instance's cpu_features checked against its own QEMU's answer (experiment/cpucheck.py), its
`<emulator>` in the domain, its version and sha256 in the manifest and the session record (a resumed
run refuses a changed file; a guest whose process runs another binary is refused), and the variant
check's line for it. The hostile values through the real command: test_hostile_qemu.py."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests import qemu_kit
from tests.unit.test_guest_domain import _spec
from vmharness.analysis import variants
from vmharness.errors import HarnessError
from vmharness.experiment import cpucheck
from vmharness.guest import domain, session
from vmharness.host.inspect import cpubits, qemu_binary
from vmharness.model import config, emulator, sections
from vmharness.system import proc
from vmharness.system.root import HostRoot

Q72 = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright (c) 2003-2022 Fabrice Bellard\n"
Q10 = "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\nCopyright (c) 2003-2025 Fabrice\n"


@pytest.mark.parametrize("value, ok", [
    ("", True), ("/usr/bin/qemu-system-x86_64", True), ("/opt/qemu-10/bin/qemu-system-x86_64", True),
    ("qemu-system-x86_64", False), ("./qemu", False), ("-L", False), ("/usr/bin/../bin/qemu", False),
    ("/usr//bin/qemu", False), ("/usr/bin/", False), ("/usr/./bin/qemu", False), ("/", False),
    ("/opt/my qemu/qemu-system-x86_64", False), ("/opt/q\n/qemu", False), ("/opt/q'/qemu", False),
])
def test_the_value_is_an_absolute_path_written_plainly(value: str, ok: bool) -> None:
    if ok:
        assert emulator.check_emulator(value, "config.guest.qemu") == value
    else:
        with pytest.raises(HarnessError, match=r"^config\.guest\.qemu "):
            emulator.check_emulator(value, "config.guest.qemu")


def test_an_instance_and_the_guest_section_take_it_and_bench_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[guest]\nqemu = "/usr/bin/qemu-system-x86_64"\n[[instance]]\nname = "a"\n'
                    '[[instance]]\nname = "b"\nqemu = "/opt/q/qemu-system-x86_64"\n')
    cfg = config.load_run(path)
    assert [session.qemu_of(cfg, i) for i in cfg.instance] == ["/usr/bin/qemu-system-x86_64",
                                                               "/opt/q/qemu-system-x86_64"]
    assert cpucheck.named_qemus(cfg) == {"/usr/bin/qemu-system-x86_64": "config.guest.qemu",
                                         "/opt/q/qemu-system-x86_64": "config.instance[1].qemu"}
    assert session.request(cfg, cfg.instance[1], "run:0123456789").qemu == "/opt/q/qemu-system-x86_64"
    assert session.request(sections.RunConfig(), sections.InstanceSection("a"), "run:0123456789").qemu is None
    path.write_text('[[instance]]\nname = "a"\nqemu = "/usr/bin/qemu-system-x86_64"\n')
    with pytest.raises(HarnessError, match="instance a: qemu is a guest's setting"):
        config.load(path)


def test_the_first_line_of_version_is_parsed_and_nothing_else_is_taken() -> None:
    assert qemu_binary.parse_version(Q72) == ("7.2.22", "Debian 1:7.2+dfsg-7+deb12u18+b3")
    assert qemu_binary.parse_version(Q10) == ("10.0.2", "Debian 1:10.0.2+ds-2+deb13u1~bpo12+1")
    assert qemu_binary.parse_version("QEMU emulator version 9.9.9\n") == ("9.9.9", "")
    for text in ("", "hello\n", "QEMU emulator version x\n", "qemu-img version 7.2.22\n",
                 "\n" + Q72, "QEMU emulator version 7.2.22 (a) and more\n"):
        assert qemu_binary.parse_version(text) is None, text


def test_this_machines_qemu_passes_with_its_version_sha256_and_cpu_answer() -> None:
    b = qemu_binary.inspect(qemu_kit.REAL, "config.guest.qemu", kvm=False)
    out = proc.run([qemu_kit.REAL, "-version"], timeout=10).stdout
    assert b.version and out.startswith(f"QEMU emulator version {b.version}")
    assert b.sha256 == hashlib.sha256(Path(b.real).read_bytes()).hexdigest()
    assert {"mds-no", "pcid", "md-clear"} <= b.cpu.known and b.cpu.host is None
    assert b.to_json() == {"path": qemu_kit.REAL, "real": b.real, "version": b.version, "build": b.build,
                           "sha256": b.sha256}


def test_a_symlink_in_a_place_of_roots_own_is_followed_and_recorded_as_its_file() -> None:
    link = qemu_kit.link("unit-link", qemu_kit.REAL)
    assert qemu_binary.check_file(str(link), "k") == str(Path(qemu_kit.REAL).resolve())


@pytest.mark.parametrize("make, said", [
    (lambda: qemu_kit.script("unit-hangs", qemu_kit.HANGS), "did not answer -version within 0.5 s"),
    (lambda: qemu_kit.script("unit-garbage", qemu_kit.GARBAGE), "its first line: 'hello \\\\x1b[2J world'"),
    (lambda: qemu_kit.script("unit-fails", qemu_kit.FAILS), "-version failed (exit 1): qemu: cannot open"),
    (lambda: qemu_kit.script("unit-no-q35", qemu_kit.NO_Q35), "QEMU 9.9.9 has no machine type q35"),
    (lambda: qemu_kit.script("unit-no-cpu", qemu_kit.NO_CPU), "cannot expand the CPU model max"),
    (lambda: qemu_kit.fifo("unit-fifo"), "is a FIFO, not a regular file"),
    (lambda: qemu_kit.trusted("unit-folder"), "is a directory, not a regular file"),
    (lambda: Path("/dev/zero"), "is a device node, not a regular file"),
    (lambda: Path("/nonexistent/qemu"), "cannot be found"),
    (lambda: qemu_kit.link("unit-loop", "qemu-system-x86_64"), "cannot be found"),
])
def test_what_is_not_a_qemu_is_refused_in_one_line_naming_the_key(make: Any, said: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if "did not answer" in said:  # the hanging one's wait; the others' scripts keep the 5 s a loaded machine needs
        monkeypatch.setattr(qemu_binary, "TIMEOUT", 0.5)
    path = make()
    with pytest.raises(HarnessError) as err:
        qemu_binary.inspect(str(path), "config.instance[2].qemu", kvm=False)
    msg = err.value.message
    assert msg.startswith(f"config.instance[2].qemu {path}: ") and said in msg and "\n" not in msg, msg
    assert err.value.hint


def test_a_file_or_folder_others_can_write_is_refused_before_it_is_run(tmp_path: Path) -> None:
    fake = qemu_kit.script("unit-writable", "#!/bin/sh\ntouch " + str(tmp_path / "ran") + "\n")
    fake.chmod(0o757)
    with pytest.raises(HarnessError, match=r"the file can be written by others than root \(owner uid 0, mode 757\)"):
        qemu_binary.inspect(str(fake), "k", kvm=False)
    fake.chmod(0o755)
    fake.parent.chmod(0o775)
    with pytest.raises(HarnessError, match=f"the folder {re.escape(str(fake.parent))} can be written by others"):
        qemu_binary.inspect(str(fake), "k", kvm=False)
    inside = tmp_path / "qemu"  # under /tmp
    inside.write_text(fake.read_text())
    inside.chmod(0o755)
    for path in (inside, qemu_kit.link("unit-out", inside)):
        with pytest.raises(HarnessError, match="the folder /tmp can be written by others than root"):
            qemu_binary.inspect(str(path), "k", kvm=False)
    assert not (tmp_path / "ran").exists()


def test_a_qemu_libvirts_user_cannot_reach_is_refused() -> None:
    fake = qemu_kit.script("unit-reach", qemu_kit.NO_Q35)
    fake.parent.chmod(0o700)  # as /root is
    with pytest.raises(HarnessError, match=f"QEMU user cannot reach it: the folder {fake.parent} is mode 700"):
        qemu_binary.check_file(str(fake), "k")
    fake.parent.chmod(0o755)
    fake.chmod(0o750)
    with pytest.raises(HarnessError, match="libvirt's QEMU user cannot run it: mode 750"):
        qemu_binary.check_file(str(fake), "k")


def _binary(path: str, version: str, known: frozenset[str]) -> qemu_binary.Binary:
    return qemu_binary.Binary(path, path, version, "", hashlib.sha256(path.encode()).hexdigest(),
                              cpubits.Qemu(known, None, f"{path} (TCG)"))


OLD = frozenset({"pcid", "md-clear", "mds-no"})
NEW = OLD | {"rfds-no", "gds-no"}


def test_each_instances_features_are_checked_against_its_own_qemu(tmp_path: Path) -> None:
    cfg = sections.RunConfig(instance=(
        sections.InstanceSection("stock", cpu_features=("-md-clear",)),
        sections.InstanceSection("new", qemu="/opt/q10/qemu", cpu_features=("-rfds-no",)),
        sections.InstanceSection("new2", qemu="/opt/q10/qemu")))
    cfg = dataclasses.replace(cfg, guest=dataclasses.replace(cfg.guest, accel="tcg"))
    inspected: list[tuple[str, str]] = []
    asked: list[bool] = []

    def inspect(path: str, where: str, kvm: bool) -> qemu_binary.Binary:
        inspected.append((path, where))
        return _binary(path, "10.0.2", NEW)

    def ask(kvm: bool) -> cpubits.Qemu:
        asked.append(kvm)
        return cpubits.Qemu(OLD, None, "qemu-system-x86_64 (TCG)")

    said: list[str] = []
    found = cpucheck.preflight(HostRoot(tmp_path), cfg, said.append, ask, inspect)
    assert inspected == [("/opt/q10/qemu", "config.instance[1].qemu")] and asked == [False]  # each QEMU once
    assert set(found) == {"new", "new2"} and found["new"].version == "10.0.2"
    assert any("config.instance[1].qemu: QEMU 10.0.2 (/opt/q10/qemu" in s for s in said)
    # the same feature on the default QEMU (7.2's list): refused, naming that QEMU
    old = sections.InstanceSection("old", cpu_features=("-rfds-no",))
    bad = dataclasses.replace(cfg, instance=(*cfg.instance, old))
    with pytest.raises(HarnessError, match=r"instance old: cpu_features '-rfds-no': qemu-system-x86_64 \(TCG\)"):
        cpucheck.preflight(HostRoot(tmp_path), bad, said.append, ask, inspect)
    # and the other way round: the instance's own QEMU is asked, not the default
    swapped = dataclasses.replace(cfg, instance=(sections.InstanceSection("new", qemu="/opt/q7/qemu",
                                                                         cpu_features=("-rfds-no",)),))
    with pytest.raises(HarnessError, match=r"instance new: cpu_features '-rfds-no': /opt/q7/qemu \(TCG\)"):
        cpucheck.preflight(HostRoot(tmp_path), swapped, said.append, ask,
                           lambda p, w, k: _binary(p, "7.2.22", OLD))


def test_no_qemu_named_asks_nothing(tmp_path: Path) -> None:
    cfg = sections.RunConfig(instance=(sections.InstanceSection("a"),))
    assert cpucheck.preflight(HostRoot(tmp_path), cfg, print, lambda k: pytest.fail("asked"),
                              lambda p, w, k: pytest.fail("inspected")) == {}


def test_the_domain_names_its_emulator_first_among_its_devices() -> None:
    dom = ET.fromstring(domain.to_xml(_spec(emulator="/opt/q10/bin/qemu-system-x86_64")))
    devices = dom.find("devices")
    assert devices is not None and devices[0].tag == "emulator"
    assert devices[0].text == "/opt/q10/bin/qemu-system-x86_64"
    assert ET.fromstring(domain.to_xml(_spec())).find("devices/emulator") is None


class _Run:
    path = Path("/r")

    def __init__(self, manifest: dict[str, Any]) -> None:
        self.manifest = manifest

    def update_manifest(self, **changes: Any) -> None:
        self.manifest.update(changes)


def test_the_manifest_keeps_each_qemu_and_a_resumed_run_refuses_another_file() -> None:
    b = _binary("/opt/q10/qemu", "10.0.2", NEW)
    run = _Run({})
    cpucheck.record(run, {"new": b})  # type: ignore[arg-type]
    assert run.manifest["qemu"] == {"new": b.to_json()}
    cpucheck.record(run, {"new": b})  # type: ignore[arg-type]  # resumed, the same file: nothing to say
    rebuilt = dataclasses.replace(b, sha256="0" * 64)
    with pytest.raises(HarnessError, match=r"instance new: its QEMU /opt/q10/qemu .* is not the file this run began"):
        cpucheck.record(run, {"new": rebuilt})  # type: ignore[arg-type]
    with pytest.raises(HarnessError, match="damaged qemu record"):
        cpucheck.record(_Run({"qemu": ["x"]}), {})  # type: ignore[arg-type]


def test_a_guest_whose_process_runs_another_binary_is_refused() -> None:
    cfg = sections.RunConfig(instance=(sections.InstanceSection("a"),
                                       sections.InstanceSection("b", qemu=qemu_kit.REAL)))
    real = str(Path(qemu_kit.REAL).resolve())
    assert session.emulator_check(cfg, cfg.instance[0], "/usr/bin/whatever") == "/usr/bin/whatever"
    assert session.emulator_check(cfg, cfg.instance[1], real) == real
    for exe, said in (("/opt/other/qemu", "/opt/other/qemu"), ("", "a binary not found")):
        with pytest.raises(HarnessError, match=f"instance b: its guest's QEMU process runs {said}, not"):
            session.emulator_check(cfg, cfg.instance[1], exe)


def test_the_variant_check_shows_the_qemu_each_ran() -> None:
    facts = {"kernel": "6.1", "cmdline": "x", "cpu_flags": [], "vulnerabilities": {}}
    manifest = {"config": {"instance": [{"name": "stock", "qemu": ""}, {"name": "new", "qemu": "/opt/q10/qemu"}]},
                "instances": {"stock": facts, "new": facts}, "host": {"qemu": Q72.split("\n")[0]},
                "qemu": {"new": _binary("/opt/q10/qemu", "10.0.2", NEW).to_json()}}
    [d] = variants.diffs(manifest, "stock")
    assert "qemu: '' -> '/opt/q10/qemu'" in d.lines
    assert any(line.startswith("QEMU: QEMU 7.2.22 (libvirt's default) -> QEMU 10.0.2 (/opt/q10/qemu, sha256 ")
               for line in d.lines), d.lines
    assert d.asked and d.seen and not variants.diff_flags([d], "stock")
