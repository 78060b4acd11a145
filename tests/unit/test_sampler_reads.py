"""Reading a sampler's stream while it grows: a read the filesystem refuses for a moment (ENODATA, as 9p
under Linux 7.3 answered the rig's kexec test) is tried again; one refused to the end is the run's
error in one line, never a traceback; any other error is not tried again."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vmharness.bench import sampler
from vmharness.errors import HarnessError
from vmharness.rundir import samples
from vmharness.rundir.store import RunDir
from vmharness.system.machine import Machine


def refusing(monkeypatch: pytest.MonkeyPatch, target: Path, times: int, code: int = errno.ENODATA) -> list[int]:
    """Path.open of `target` refused with `code` its first `times` calls; the list counts every call."""
    calls: list[int] = []
    real: Callable[..., Any] = Path.open

    def fake(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == target:
            calls.append(1)
            if len(calls) <= times:
                raise OSError(code, "refused here")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "open", fake)
    return calls


def test_a_read_refused_for_a_moment_is_tried_again_and_one_refused_to_the_end_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "stream"
    path.write_bytes(b"0123456789")
    calls = refusing(monkeypatch, path, samples.READ_TRIES - 1)
    assert samples.read_from(path, 4, 3) == b"456" and len(calls) == samples.READ_TRIES
    calls = refusing(monkeypatch, path, samples.READ_TRIES)
    with pytest.raises(OSError, match="refused here"):
        samples.read_from(path, 0)
    assert len(calls) == samples.READ_TRIES
    calls = refusing(monkeypatch, path, 1, errno.EACCES)  # the control: not a moment's refusal
    with pytest.raises(PermissionError):
        samples.read_from(path, 0)
    assert len(calls) == 1
    assert not samples.has_snapshot_after(path, 0.0)  # refused: not known to be there, and no traceback


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[tuple[sampler.Samplers, Path]]:
    """A real sampler on this machine, stopped after three snapshots."""
    s = sampler.Samplers(RunDir.create(tmp_path / "run", {}), 0.2)
    s.start([Machine()])
    try:
        (path,) = s.files.values()
        deadline = time.monotonic() + 30
        while len(samples.parse(path.read_text(errors="replace"))[1]) < 3:
            assert time.monotonic() < deadline, "no three snapshots within 30 s"
            time.sleep(0.02)
    finally:
        s.stop()
    yield s, path


def test_a_points_figures_are_read_through_a_moments_refusal_and_one_refused_to_the_end_is_one_line(
        stream: tuple[sampler.Samplers, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    s, path = stream
    snaps = samples.parse(path.read_text())[1]
    start, end = snaps[0].t, snaps[-1].t
    (label,) = s.files
    refusing(monkeypatch, path, samples.READ_TRIES - 1)
    got = s.summaries({label: 0}, start, end, {})
    assert set(got) == {label} and got[label]["window"]
    refusing(monkeypatch, path, 10 * samples.READ_TRIES)
    with pytest.raises(HarnessError) as exc:
        s.summaries({label: 0}, start, end, {})
    assert str(path) in exc.value.message and "refused here" in exc.value.message, exc.value.message
    assert "--resume" in exc.value.hint and "\n" not in exc.value.message
