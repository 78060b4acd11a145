"""QEMU's own list of CPU features, read from recorded answers of QEMU 7.2 (`-cpu help`, and QMP's
query-cpu-model-expansion of `max` under TCG), and the answers a damaged or foreign binary could give."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmharness.errors import HarnessError
from vmharness.host.inspect import qemu_cpu

GOLDEN = Path(__file__).with_name("golden")
HELP = (GOLDEN / "qemu-7.2-cpu-help.txt").read_text()
QMP = (GOLDEN / "qemu-7.2-qmp-expansion-max-tcg.jsonl").read_text()


def test_qemu_72_recognizes_the_speculation_bits_it_has_and_not_the_later_ones() -> None:
    names = qemu_cpu.parse_help(HELP)
    assert len(names) == 319
    assert {"md-clear", "spec-ctrl", "stibp", "ssbd", "virt-ssbd", "amd-ssbd", "arch-capabilities", "mds-no",
            "taa-no", "ibrs-all", "pschange-mc-no", "skip-l1dfl-vmentry", "ibpb"} <= names
    assert not {"rfds-no", "gds-no", "bhi-no", "srso-no"} & names  # added after 7.2
    assert not {"x86", "host", "max", "Skylake-Client", "Recognized"} & names  # models and words are not features


def test_the_section_ends_at_the_next_heading() -> None:
    text = "Recognized CPUID flags:\n  md-clear ssbd\n\n  spec-ctrl\nAvailable machines:\n  pc q35\n"
    assert qemu_cpu.parse_help(text) == {"md-clear", "ssbd", "spec-ctrl"}


@pytest.mark.parametrize(("text", "says"), [
    ("Available CPUs:\nx86 max\n", "has no 'Recognized CPUID flags:' section"),
    ("Recognized CPUID flags:\nAvailable machines:\n", "lists no feature"),
    ("Recognized CPUID flags:\n  md-clear $(reboot)\n", "lists a feature named '$(reboot)'"),
])
def test_an_answer_that_is_not_qemus_is_refused(text: str, says: str) -> None:
    with pytest.raises(HarnessError) as err:
        qemu_cpu.parse_help(text)
    assert says in err.value.message


def test_the_expansion_keeps_only_booleans() -> None:
    props = qemu_cpu.parse_expansion(QMP)
    assert props["svm"] is True and props["md-clear"] is False and props["mds-no"] is False
    assert "family" not in props and "vendor" not in props  # numbers and strings are not features


def test_a_refused_model_is_named() -> None:
    reply = ('{"QMP": {}}\n{"return": {}}\n'
             '{"error": {"class": "GenericError", "desc": "CPU model \'nope\' not found"}}\n')
    with pytest.raises(HarnessError) as err:
        qemu_cpu.parse_expansion(reply)
    assert "CPU model 'nope' not found" in err.value.message


def test_an_answer_without_an_expansion_is_refused() -> None:
    with pytest.raises(HarnessError):
        qemu_cpu.parse_expansion('{"QMP": {}}\nnot json\n[1]\n{"return": {}}\n')


@pytest.mark.parametrize(("accel", "model"), [("xen", "max"), ("tcg", "max,+md-clear"), ("kvm", "-cpu")])
def test_expansion_takes_only_an_accelerator_and_a_model_name(accel: str, model: str) -> None:
    with pytest.raises(HarnessError):
        qemu_cpu.expansion(accel, model, qemu="/nonexistent/qemu")


def test_a_missing_qemu_is_named() -> None:
    with pytest.raises(HarnessError) as err:
        qemu_cpu.recognized("/nonexistent/qemu-system-x86_64")
    assert "is not installed" in err.value.message
