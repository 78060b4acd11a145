"""The installed QEMU answers for its own CPU features, fast; under TCG its `max` model shows none of
the speculation-control bits (TCG does not emulate them: asked for one, QEMU warns and drops it)."""

from __future__ import annotations

import shutil
import time

import pytest

from vmharness.host.inspect import qemu_cpu

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86 not installed")]

SPECULATION = {"md-clear", "spec-ctrl", "stibp", "ssbd", "virt-ssbd", "amd-ssbd", "arch-capabilities", "mds-no",
               "taa-no", "ibrs-all", "pschange-mc-no", "skip-l1dfl-vmentry", "ibpb"}


def test_the_binary_lists_its_features_within_a_second() -> None:
    began = time.monotonic()
    names = qemu_cpu.recognized()
    assert time.monotonic() - began < 2.0
    assert {"sse2", "lm", "svm", "vmx", "md-clear"} <= names and len(names) > 200


def test_tcg_max_shows_no_speculation_control_bit() -> None:
    props = qemu_cpu.expansion("tcg", "max")
    assert set(props) <= qemu_cpu.recognized()
    assert props["lm"] and props["svm"]
    present = {name for name in SPECULATION if props.get(name)}
    assert not present, present
