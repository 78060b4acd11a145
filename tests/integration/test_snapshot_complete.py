"""host-snapshot is complete: each inspection command answers on a snapshot of this machine exactly as it
does on the machine itself, and reads nothing there that the snapshot left out.

Root, no QEMU (the KVM probe aside), a few seconds. The rig repeats this inside L1, prepared and not
(tests/integration/test_prepare_in_vm.py). What is normalised, and why: tests/snapshot_compare.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.snapshot_compare import compare

pytestmark = pytest.mark.integration

PCI = "/sys/bus/pci/devices"


def a_nic() -> str:
    """This machine's first network device (PCI class 02), else its first PCI device."""
    bdfs = sorted(os.listdir(PCI))
    return next((b for b in bdfs if Path(f"{PCI}/{b}/class").read_text().startswith("0x02")), bdfs[0])


def commands(bdf: str) -> list[list[str]]:
    return [
        ["host-check", "--json"],
        ["host-groups", "--json"],
        ["host-groups", "--class", "network"],
        ["host-prepare", "--dry-run", "--hugepages", "64M", "--json"],
        # without an IOMMU (this machine) an error, with one (the rig) a plan: equal either way
        ["host-prepare", "--dry-run", "--bdf", bdf, "--hugepages", "64M", "--json"],
        ["tune", "plan", "--json"],
        ["run", "--print-xml"],
        ["run", "--print-xml", "--bdf", bdf, "--hugepages"],
    ]


def test_every_inspection_command_answers_on_a_snapshot_as_on_this_host(tmp_path: Path) -> None:
    for result in compare(tmp_path, commands(a_nic())):
        argv = " ".join(result["argv"])
        assert result["snapshot"] == result["live"], argv
        assert result["unread"] == [], f"{argv} read on the snapshot what it lacks"
        assert result["program_knobs_said"], argv


def test_a_tuning_plan_on_a_snapshot_proposes_what_it_does_here(tmp_path: Path) -> None:
    (result,) = compare(tmp_path, [["tune", "plan", "--json", "--profile", "seeds"]])
    assert result["live"][0] == 0 and '"knob": "sysctl"' in result["snapshot"][1], "sysctls are in the snapshot"
    for knob in ("thp", "ksm", "clocksource"):
        assert f'"knob": "{knob}"' in result["snapshot"][1], knob
