"""Every test that uses the session's L1, itself or through a fixture that holds L1 for a module, is the
rig stream's (tests/integration/conftest.py marks it `rig`; tests/streams.py runs `-m rig` there). A module
fixture that asked `session_rig` and not `l1` once took test_kvm_rig.py and test_l2.py out of the rig's
stream into the host's. Collected by a pytest of its own, with the integration tests' fixtures and hook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.rig.paths import REPO

CONFTEST = ("from tests.integration.conftest import (  # noqa: F401\n"
            "    l1, own_rigs, pytest_collection_modifyitems, session_rig)\n")
TESTS = '''
import pytest


@pytest.fixture(scope="module")
def held(session_rig):
    return session_rig


def test_through_a_module_fixture(held) -> None: ...
def test_with_l1(l1) -> None: ...
def test_with_rigs_of_its_own(own_rigs) -> None: ...
def test_without_a_rig(tmp_path) -> None: ...
'''


def _collected(tmp_path: Path, marks: str) -> set[str]:
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                          "-o", "addopts=", "-m", marks, "--rootdir", str(tmp_path), str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO), "VMHARNESS_TEST_STREAMS": "1"})
    return {line.split("::")[1] for line in res.stdout.splitlines() if "::" in line}


def test_a_test_using_the_session_rig_by_any_fixture_is_the_rigs(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_uses.py").write_text(TESTS)
    assert _collected(tmp_path, "rig") == {"test_through_a_module_fixture", "test_with_l1",
                                           "test_with_rigs_of_its_own"}
    assert _collected(tmp_path, "not rig") == {"test_without_a_rig"}
