"""A command's own /tmp and /run/vmharness (tests/own_mounts.py), entered for real in a forked child: what
it needs under /tmp is there at the same paths, nothing else of /tmp is, and what it writes stays in
its own folders."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import own_mounts


def _in_child(own: own_mounts.Own, check: Callable[[], bool]) -> int:
    """0 if `check` holds inside the child's namespace, 1 if not, 2 if entering or checking raised."""
    pid = os.fork()
    if pid == 0:
        try:
            own_mounts.enter(**own.request())  # type: ignore[arg-type]
            os._exit(0 if check() else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_inside_the_cases_and_the_checkout_are_where_they_were_and_the_rest_of_tmp_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout under /tmp (a clean clone in /tmp/x) must stay readable: the command imports modules
    as it goes (a clone's `host-restore` failed on `vmharness.experiment` without it). Another folder of
    /tmp must not be seen, /tmp must keep its mode 1777, and what the command writes into /tmp and
    /run/vmharness lands in its own folders."""
    checkout = Path(tempfile.mkdtemp(prefix="own-checkout-", dir="/tmp"))
    other = Path(tempfile.mkdtemp(prefix="own-other-", dir="/tmp"))
    try:
        (checkout / "module.py").write_text("x = 1\n")
        cases = tmp_path / "cases"
        cases.mkdir()
        (cases / "case").write_text("built\n")
        monkeypatch.setattr(own_mounts, "REPO", checkout)
        own = own_mounts.Own.make(tmp_path / "own", cases)
        assert set(own.keep) == {checkout.resolve(), cases.resolve()}

        def sees() -> bool:
            Path("/tmp/written-inside").write_text("x")
            Path("/run/vmharness/written-inside").write_text("x")
            return ((checkout / "module.py").read_text() == "x = 1\n" and (cases / "case").read_text() == "built\n"
                    and not other.exists() and os.stat("/tmp").st_mode & 0o7777 == 0o1777)

        assert _in_child(own, sees) == 0
        assert (own.tmp / "written-inside").is_file() and (own.run / "written-inside").is_file()
        assert not os.path.lexists("/tmp/written-inside") and not os.path.lexists("/run/vmharness/written-inside")
        # the control: without the checkout kept, the child does not see it
        monkeypatch.setattr(own_mounts, "REPO", Path("/nonexistent-checkout"))
        bare = own_mounts.Own.make(tmp_path / "bare", cases)
        assert _in_child(bare, lambda: (checkout / "module.py").exists()) == 1
    finally:
        shutil.rmtree(checkout)
        shutil.rmtree(other)
