"""The host's switches of an attribution study (model/hoststudy.py) and the attack-vector switches
(model/vectors.py): each host switch a host boot of its own with the guest's off word for it and the
reference's guest in it; the vectors in one mitigations= word, refused on a kernel without them with the
reason; and, with one_on, only-X of a switch that changes nothing dropped with it (experiment/runner.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import hostboot_kit
from tests.hostboot_kit import BootingHost
from vmharness.errors import HarnessError
from vmharness.experiment import runner
from vmharness.experiment.hostboots import plan, target
from vmharness.guest import image, instance
from vmharness.model import config, sections, vectors
from vmharness.model.hostboots import CmdlineMode, HostBootSection
from vmharness.rundir.store import RunDir
from vmharness.system.root import HostRoot


def _cfg(study: dict[str, Any], cmdline: str = "pti=on", under: str = "", **more: Any) -> sections.RunConfig:
    body = {"instance": [{"name": "on", "cmdline": cmdline, "host_boot": under}, {"name": "other"}],
            "study": study, "sweep": {"connections": "8,16", "iterations": 2}, **more}
    cfg = config.run_from_json(body)
    assert isinstance(cfg, sections.RunConfig)
    return cfg


def test_each_host_switch_is_a_host_boot_of_its_own_with_the_references_guest_in_it() -> None:
    cfg = _cfg({"switches": ["pti"], "host_switches": ["spectre_v2", "guest_host"]})
    assert [(i.name, i.cmdline, i.host_boot) for i in cfg.instance] == [
        ("on", "pti=on", ""), ("no-pti", "pti=off", ""),  # the guest's study stays in the reference's host boot
        ("host-no-spectre_v2", "pti=on", "host-no-spectre_v2"), ("host-no-guest_host", "pti=on", "host-no-guest_host"),
        ("other", "", "")]
    # the boot the run started in is the reference: its kernel (""), its command line and the switch's off word
    assert cfg.host_boot == (HostBootSection("host-no-spectre_v2", "", "", "spectre_v2=off", "add"),
                             HostBootSection("host-no-guest_host", "", "", "mitigations=auto,no_guest_host", "add"))
    # paired round by round: each round visits the reference's host boot and each host switch's
    assert [(s.round, s.boot, s.instances) for s in plan.stops(cfg)][:3] == [
        (0, "", ("on", "no-pti", "other")), (0, "host-no-spectre_v2", ("host-no-spectre_v2",)),
        (0, "host-no-guest_host", ("host-no-guest_host",))]
    # a resumed run's configuration already holds them, and reads back as it was
    assert config.run_from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


@pytest.mark.parametrize(("mode", "line", "want"), [
    ("add", "quiet spectre_v2=on", "quiet spectre_v2=off"),  # the reference's word for it taken out
    ("replace", "root=/dev/vda spectre_v2=retpoline quiet", "root=/dev/vda quiet spectre_v2=off")])
def test_a_named_reference_host_boot_lends_its_kernel_and_its_line_less_the_switch(mode: CmdlineMode, line: str,
                                                                                   want: str) -> None:
    ref = {"name": "patched", "kernel": "/boot/vmlinuz-7", "initrd": "/boot/initrd-7", "cmdline": line,
           "cmdline_mode": mode}
    cfg = _cfg({"host_switches": ["spectre_v2"]}, "pti=on", "patched", **{"host_boot": [ref]})
    assert cfg.host_boot[1] == HostBootSection("host-no-spectre_v2", "/boot/vmlinuz-7", "/boot/initrd-7", want, mode)
    assert [i.name for i in cfg.instance] == ["on", "host-no-spectre_v2", "other"]  # a host-only study


@pytest.mark.parametrize(("study", "more", "said"), [
    ({"host_switches": ["spectre_v2"]}, {"host_boot": [{"name": "x", "kernel": "/boot/k", "cmdline": "nospectre_v2"}]},
     "already turns spectre_v2 off (nospectre_v2"),
    ({"host_switches": ["guest_host"]}, {"host_boot": [{"name": "x", "kernel": "/boot/k",
                                                        "cmdline": "mitigations=auto,nosmt"}]},
     "sets mitigations= in its cmdline"),
    ({"host_switches": ["spectre_v2"]}, {"host_boot": [{"name": "host-no-spectre_v2", "kernel": "/boot/k"}]},
     "a host switch's own host boot"),
])
def test_a_reference_host_boot_the_study_cannot_turn_off_from_is_refused(study: dict[str, Any], more: dict[str, Any],
                                                                         said: str) -> None:
    with pytest.raises(HarnessError, match=r"study\.host_switches") as exc:
        _cfg(study, under=more["host_boot"][0]["name"], **more)
    assert said in exc.value.message


def test_a_name_the_host_switches_take_is_refused() -> None:
    with pytest.raises(HarnessError, match="an instance is already named 'host-no-mds'"):
        config.run_from_json({"instance": [{"name": "on"}, {"name": "host-no-mds"}],
                              "study": {"host_switches": ["mds"]}})


def test_the_guests_attack_vectors_are_turned_off_in_one_word() -> None:
    cfg = _cfg({"switches": ["pti", "user_kernel", "cross_thread"]})
    got = {i.name: i.cmdline for i in cfg.instance}
    assert got["no-user_kernel"] == "pti=on mitigations=auto,no_user_kernel"
    assert got["all-off"] == "pti=off mitigations=auto,no_user_kernel,no_cross_thread"
    with pytest.raises(HarnessError, match="sets mitigations= in its cmdline"):  # the study would replace it
        _cfg({"switches": ["user_user"]}, cmdline="mitigations=auto,nosmt")
    with pytest.raises(HarnessError, match="not a mitigation switch"):  # the host's vector is not the guest's
        _cfg({"switches": ["guest_host"]})
    with pytest.raises(HarnessError, match="not a host mitigation switch"):
        _cfg({"host_switches": ["user_kernel"]})


@pytest.mark.parametrize(("line", "release", "refused"), [
    ("pti=on mitigations=auto,no_user_kernel", "6.1.0-18-amd64", True),
    ("mitigations=auto,no_guest_host,no_guest_guest", "6.16.9", True),
    ("mitigations=auto,no_user_kernel", "6.17.0-rc1", False),
    ("mitigations=auto,no_user_kernel", "7.0.1", False),
    ("mitigations=auto,no_user_kernel", "?", False),  # not known: the run checks at the guest's boot
    ("spectre_v2=off mitigations=auto,nosmt", "5.10.0", False),  # no vector: any kernel
])
def test_attack_vectors_on_a_kernel_without_them_are_refused_with_the_reason(line: str, release: str,
                                                                             refused: bool) -> None:
    why = vectors.refused(line, release)
    assert (why is not None) == refused
    if why is not None:
        assert "need Linux 6.17 or later" in why and release in why and "keep every mitigation on" in why


def test_a_guest_kernel_known_to_lack_the_vectors_is_refused_before_its_guest_boots(tmp_path: Path) -> None:
    """The instance's own bzImage, or its image's kernel release; an image not built yet ("?") leaves the
    check to the run, at the guest's boot (experiment/runner.py)."""
    head = bytearray(hostboot_kit.bzimage("6.1.0-18-amd64"))
    head[0x1FE:0x200] = b"\x55\xaa"  # the boot flag the guest's reader wants too
    (tmp_path / "vmlinuz").write_bytes(bytes(head))
    line = "pti=on mitigations=auto,no_user_kernel"
    img = image.Image(tmp_path / "img", {"kernel_release": "6.1.0-50-amd64"})
    with pytest.raises(HarnessError, match=r"the attack-vector controls \(user_kernel\) need Linux 6.17 .*6.1.0-18"):
        instance._kernel(instance.VmRequest(cmdline=line, kernel=str(tmp_path / "vmlinuz")), img)
    with pytest.raises(HarnessError, match=r"need Linux 6.17 or later, and the kernel is '6.1.0-50-amd64'"):
        instance._kernel(instance.VmRequest(cmdline=line), img)
    instance._kernel(instance.VmRequest(cmdline=line), image.Image(tmp_path / "img", {"kernel_release": "?"}))
    instance._kernel(instance.VmRequest(cmdline="pti=on"), img)  # no vector: any kernel


def test_a_host_boot_turning_a_vector_off_on_an_old_kernel_is_refused_before_anything_is_taken(
        tmp_path: Path) -> None:
    host = BootingHost(tmp_path / "host")
    folder = hostboot_kit.trusted(f"hostswitch-vectors-{tmp_path.name}")
    old, new = hostboot_kit.kernel(folder, "6.12.0-1-amd64"), hostboot_kit.kernel(folder, "6.17.2-1-amd64")
    boot = HostBootSection("host-no-guest_host", old.path, "", "mitigations=auto,no_guest_host", "add")
    with pytest.raises(HarnessError, match=r"config.host_boot\[0\] \(host-no-guest_host\): the attack-vector "
                                           r"controls \(guest_host\) need Linux 6.17") as exc:
        target.of(host.root, boot, 0)
    assert "6.17 or later" in exc.value.hint
    ok = target.of(host.root, HostBootSection("v", new.path, "", "mitigations=auto,no_guest_host", "add"), 0)
    assert ok.cmdline.endswith("mitigations=auto,no_guest_host") and ok.release == "6.17.2-1-amd64"


def test_a_host_boot_without_a_kernel_boots_the_running_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = BootingHost(tmp_path / "host")
    folder = hostboot_kit.trusted(f"hostswitch-running-{tmp_path.name}")
    running = hostboot_kit.kernel(folder, hostboot_kit.HOME_RELEASE)
    monkeypatch.setattr(target, "home", lambda root: target.Target(plan.START, running, None, "x"))
    got = target.of(host.root, HostBootSection("host-no-mds", "", "", "mds=off", "add"), 0)
    assert got.kernel == running and got.cmdline == "root=/dev/vda ro quiet mds=off"
    with pytest.raises(HarnessError, match=r"initrd is set, and it has no kernel"):
        config.run_from_table({"instance": [{"name": "a", "host_boot": "x"}],
                              "host_boot": [{"name": "x", "initrd": "/boot/initrd.img"}]})


def test_only_x_of_a_switch_that_changes_nothing_is_dropped_with_it(tmp_path: Path) -> None:
    """pti, mds and retbleed with one_on; mds found to change nothing: only-mds (pti and retbleed off,
    mds on) is all-off's guest again, dropped with no-mds, as only-pti (no-retbleed) and only-retbleed
    (no-pti) are."""
    cfg = _cfg({"switches": ["pti", "mds", "retbleed"], "one_on": True})
    run = RunDir.create(tmp_path / "run", {"config": cfg.to_json()})
    said: list[str] = []
    runner.Runner(cfg, run, HostRoot(tmp_path / "root"), said.append)._drop("no-mds", 0, "the same mitigations")
    dropped = {r["instance"]: r["reason"] for r in run.records() if r.get("kind") == "dropped"}
    assert set(dropped) == {"no-mds", "only-pti", "only-retbleed", "only-mds"}
    assert dropped["only-mds"].startswith("it differs from all-off only in switches that change nothing here (mds)")
    assert "all-off" not in dropped  # pti and retbleed off: measures what no other instance does
