"""A rig test whose L1 wedged runs once more on a fresh L1 (tests/integration/conftest.py
ONCE_MORE_IF_WEDGED), and says why in the warnings' summary; any other failure, or a second wedge, is the
test's. Tried on a pytest of its own, with the integration tests' hook and mark and a stand-in L1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.rig.paths import REPO

CONFTEST = "from tests.integration.conftest import ONCE_MORE_IF_WEDGED, pytest_runtest_makereport  # noqa: F401\n"
TESTS = '''
import pytest
from tests.integration.conftest import ONCE_MORE_IF_WEDGED
from tests.rig.failures import Wedged

pytestmark = [ONCE_MORE_IF_WEDGED]
runs = {"once": 0, "twice": 0, "real": 0}


def test_wedged_once() -> None:
    runs["once"] += 1
    if runs["once"] == 1:
        raise Wedged("cpu1 of L1 has a timer due 50 s ago that it never took")


def test_wedged_twice() -> None:
    runs["twice"] += 1
    raise Wedged(f"wedged again, run {runs['twice']}")


def test_a_real_failure() -> None:
    runs["real"] += 1
    assert runs["real"] == 0, f"run {runs['real']}"
'''


def test_only_a_wedge_is_run_again_once_and_its_reason_is_said(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_wedges.py").write_text(TESTS)
    res = subprocess.run([sys.executable, "-m", "pytest", "-raR", "-p", "no:cacheprovider", "-o", "addopts=",
                          "--rootdir", str(tmp_path), str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO), "VMHARNESS_TEST_STREAMS": "1"}, cwd=tmp_path)
    out = res.stdout
    assert "2 failed, 1 passed, 3 warnings, 2 rerun in" in out, out  # a warning for each wedge
    assert "RERUN test_wedges.py::test_wedged_once" in out and "PASSED test_wedges.py::test_wedged_once" in out
    assert "RERUN test_wedges.py::test_wedged_twice" in out and "wedged again, run 2" in out
    assert "RERUN test_wedges.py::test_a_real_failure" not in out and "AssertionError: run 1" in out
    assert "L1 wedged in the test's call: cpu1 of L1 has a timer due 50 s ago that it never took" in out
