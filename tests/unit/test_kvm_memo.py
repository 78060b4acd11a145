"""The KVM probe's answer kept for the host's boot (host/inspect/kvm_memo.py): taken again only under the
same key, never from a file the harness did not write, never written through a link; and the probe
(kvm.py) measures once for two commands, again once what it depends on changes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vmharness.host.inspect import kvm, kvm_boot, kvm_memo

ANSWER = {"usable": False, "detail": "this /dev/kvm cannot run a standard kernel", "linux": {"tried": True}}


@pytest.fixture()
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A boot id, a /dev/kvm, a kvm module with a parameter, a QEMU and a kernel, all files of the test's."""
    boot_id, dev, modules = tmp_path / "boot_id", tmp_path / "kvm", tmp_path / "module"
    boot_id.write_text("6f1c0a3e-0000-4000-8000-000000000001\n")
    dev.write_text("")
    (modules / "kvm" / "parameters").mkdir(parents=True)
    (modules / "kvm" / "parameters" / "halt_poll_ns").write_text("200000\n")
    (modules / "vfio").mkdir()  # not a kvm module: not in the key
    qemu, kernel = tmp_path / "qemu-system-x86_64", tmp_path / "vmlinux"
    qemu.write_bytes(b"qemu")
    kernel.write_bytes(b"kernel")
    monkeypatch.setattr(kvm_memo, "BOOT_ID", boot_id)
    monkeypatch.setattr(kvm_memo, "MODULES", modules)
    return {"boot_id": boot_id, "dev": dev, "modules": modules, "qemu": qemu, "kernel": kernel}


def _key(m: dict[str, Path]) -> dict[str, Any]:
    return kvm_memo.key(str(m["dev"]), str(m["qemu"]), m["kernel"], (5.0, 5.0))


def test_an_answer_kept_is_taken_again_under_the_same_key_alone(machine: dict[str, Path]) -> None:
    kvm_memo.keep(_key(machine), ANSWER)
    assert kvm_memo.recall(_key(machine)) == ANSWER
    assert sorted(_key(machine)["modules"]) == ["kvm"]
    def node_anew() -> None:  # /dev/kvm made anew, as a KVM module loaded again makes it
        machine["dev"].unlink()
        machine["dev"].write_text("")

    changes: list[Callable[[], object]] = [
        lambda: (machine["modules"] / "kvm" / "parameters" / "halt_poll_ns").write_text("0\n"),  # a parameter
        lambda: (machine["modules"] / "kvm_amd").mkdir(),  # a module loaded
        lambda: machine["boot_id"].write_text("6f1c0a3e-0000-4000-8000-000000000002\n"),  # a reboot
        lambda: os.utime(machine["qemu"], (1, 1)),  # another QEMU
        lambda: machine["kernel"].write_bytes(b"another kernel"),  # another kernel
        node_anew,
        lambda: os.chmod(machine["dev"], 0o600),  # another mode: who may open it
    ]
    for change in changes:
        kvm_memo.keep(_key(machine), ANSWER)
        assert kvm_memo.recall(_key(machine)) == ANSWER
        change()
        assert kvm_memo.recall(_key(machine)) is None
    assert kvm_memo.key("/nonexistent/kvm", None, None, (5.0, 5.0))["dev"] == ["/nonexistent/kvm", None]


def test_the_node_given_the_owner_and_mode_it_had_keeps_the_answer(machine: dict[str, Path]) -> None:
    """The harness's libvirtd sets /dev/kvm's group and mode, here to what they were: the node's change
    time moves, nothing the probe depends on does (every test module's libvirtd cost the probe again)."""
    kvm_memo.keep(_key(machine), ANSWER)
    st = os.stat(machine["dev"])
    time.sleep(0.01)
    os.chown(machine["dev"], st.st_uid, st.st_gid)
    os.chmod(machine["dev"], st.st_mode & 0o7777)
    assert os.stat(machine["dev"]).st_ctime_ns != st.st_ctime_ns
    assert kvm_memo.recall(_key(machine)) == ANSWER


@pytest.mark.parametrize("text", ["", "{", "[]", '{"key": 1}', "x" * (kvm_memo.MAX_BYTES + 1)])
def test_a_damaged_file_is_not_taken(machine: dict[str, Path], text: str) -> None:
    (kvm_memo.STATE_DIR / kvm_memo.NAME).write_text(text)
    assert kvm_memo.recall(_key(machine)) is None


@pytest.mark.parametrize("answer", [{"usable": "no", "detail": "x"}, {"usable": False}, {"detail": "x"}, "usable"])
def test_an_answer_of_the_wrong_shape_under_the_right_key_is_not_taken(machine: dict[str, Path], answer: Any) -> None:
    (kvm_memo.STATE_DIR / kvm_memo.NAME).write_text(json.dumps({"key": _key(machine), "answer": answer}))
    assert kvm_memo.recall(_key(machine)) is None


def test_a_link_at_the_name_is_neither_read_nor_written_through(machine: dict[str, Path], tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text(json.dumps({"key": _key(machine), "answer": ANSWER}))
    (kvm_memo.STATE_DIR / kvm_memo.NAME).symlink_to(canary)
    assert kvm_memo.recall(_key(machine)) is None
    kvm_memo.keep(_key(machine), {**ANSWER, "usable": True})
    assert json.loads(canary.read_text())["answer"] == ANSWER  # not written through
    os.unlink(kvm_memo.STATE_DIR / kvm_memo.NAME)
    os.link(canary, kvm_memo.STATE_DIR / kvm_memo.NAME)  # a hard link: the same file under two names
    assert kvm_memo.recall(_key(machine)) is None
    kvm_memo.keep(_key(machine), {**ANSWER, "usable": True})
    assert json.loads(canary.read_text())["answer"] == ANSWER


def test_no_boot_id_keeps_nothing(machine: dict[str, Path]) -> None:
    machine["boot_id"].unlink()
    kvm_memo.keep(_key(machine), ANSWER)
    assert not (kvm_memo.STATE_DIR / kvm_memo.NAME).exists() and kvm_memo.recall(_key(machine)) is None


def test_the_probe_measures_once_for_two_commands_and_again_after_a_change(
        machine: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[str] = []

    def measure(dev: str, timeout: float, linux_timeout: float, kernel: object) -> kvm.KvmProbe:
        measured.append(dev)
        return kvm.KvmProbe(False, f"measured {len(measured)}", {"linux": {"tried": True}})

    monkeypatch.setattr(kvm, "_probe", measure)
    monkeypatch.setattr(kvm, "PVM_MODULE", str(machine["modules"]))  # a PVM /dev/kvm: its "no" is kept
    monkeypatch.setattr(kvm_boot, "qemu_binary", lambda: str(machine["qemu"]))
    monkeypatch.setattr(kvm_boot, "find_kernel", lambda: (machine["kernel"], "the image's kernel"))
    for _ in range(2):  # two commands: each its own process, so its own once-per-process answers
        monkeypatch.setattr(kvm, "_MEASURED", {})
        assert kvm.probe(str(machine["dev"])).to_json() == {"usable": False, "detail": "measured 1",
                                                           "linux": {"tried": True}}
    (machine["modules"] / "kvm_amd").mkdir()  # kvm_amd loaded: measured again
    monkeypatch.setattr(kvm, "_MEASURED", {})
    assert kvm.probe(str(machine["dev"])).detail == "measured 2" and len(measured) == 2


@pytest.mark.parametrize("usable", [True, False])
def test_off_a_pvm_host_a_yes_is_kept_and_a_no_measured_again(machine: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch, usable: bool) -> None:
    """A "no" that may rest on a deadline missed under load is not kept for the next command."""
    measured: list[str] = []

    def measure(dev: str, timeout: float, linux_timeout: float, kernel: object) -> kvm.KvmProbe:
        measured.append(dev)
        return kvm.KvmProbe(usable, "measured", {"linux": {"tried": True}})

    monkeypatch.setattr(kvm, "_probe", measure)
    monkeypatch.setattr(kvm, "PVM_MODULE", str(machine["modules"] / "kvm_pvm"))  # not loaded
    monkeypatch.setattr(kvm_boot, "qemu_binary", lambda: str(machine["qemu"]))
    monkeypatch.setattr(kvm_boot, "find_kernel", lambda: (machine["kernel"], "the image's kernel"))
    for _ in range(2):
        monkeypatch.setattr(kvm, "_MEASURED", {})
        assert kvm.probe(str(machine["dev"])).usable is usable
    assert len(measured) == (1 if usable else 2)
