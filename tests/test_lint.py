"""The linters are part of the suite: a lint failure is a test failure. ruff and mypy; import-linter
holds the layers and forbids import circles (the contracts in pyproject.toml, docs/architecture.md),
seeing imports made inside functions as well; and no module of the package is over 300 lines."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.rig.paths import cache_lock, machine_cache
from vmharness.system import proc

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MAX_LINES = 300


def test_ruff() -> None:
    res = proc.run([BIN / "ruff", "check", "."], cwd=REPO, timeout=120, check=False)
    assert res.ok, res.stdout + res.stderr


def test_mypy() -> None:
    """mypy's incremental cache is kept once per machine, outside every clone: a clean clone checks in
    seconds what a clone checked before (mypy takes a module's cache only while the module's source has
    the same hash and nothing it imports was checked again since), instead of about 25 s of CPU from
    nothing. One mypy at a time uses it: concurrent runs on one cache have crashed mypy."""
    with cache_lock(timeout=900, root=machine_cache("mypy")) as cache:
        res = proc.run([BIN / "mypy", "--cache-dir", cache], cwd=REPO, timeout=600, check=False)
    assert res.ok, res.stdout + res.stderr


def test_imports_keep_the_layers_and_make_no_circle() -> None:
    res = proc.run([BIN / "lint-imports", "--no-cache"], cwd=REPO, timeout=120, check=False)
    assert res.ok, res.stdout[-4000:] + res.stderr
    assert "0 broken" in res.stdout and "3 kept" in res.stdout, res.stdout[-2000:]


def test_no_module_is_over_300_lines() -> None:
    sizes = {p.relative_to(REPO): len(p.read_text().splitlines()) for p in (REPO / "vmharness").rglob("*.py")}
    assert len(sizes) > 100  # the package, not an empty glob
    over = {str(p): n for p, n in sizes.items() if n > MAX_LINES}
    assert not over, f"split by concern (docs/architecture.md): {over}"
