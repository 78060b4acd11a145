"""ruff and mypy are part of the suite: a lint failure is a test failure."""

from __future__ import annotations

import sys
from pathlib import Path

from vmharness.system import proc

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_ruff() -> None:
    res = proc.run([BIN / "ruff", "check", "."], cwd=REPO, timeout=120, check=False)
    assert res.ok, res.stdout + res.stderr


def test_mypy() -> None:
    res = proc.run([BIN / "mypy"], cwd=REPO, timeout=600, check=False)
    assert res.ok, res.stdout + res.stderr
