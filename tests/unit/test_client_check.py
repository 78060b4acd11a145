"""Each client's wrk is started once before a bench or a run takes anything (bench/machines.py
`check_clients`): one that does not start is said first in one line naming its key, where every point of
the sweep failed before, each after its own wait. This machine's real wrk (`make deps` installs it) is
the control; a client over ssh is a fake Machine answering as a remote shell does."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from vmharness.bench import machines
from vmharness.errors import HarnessError
from vmharness.model.sections import ClientSection
from vmharness.system import proc
from vmharness.system.machine import Machine


def test_this_machines_wrk_starts() -> None:
    machines.check_clients([ClientSection()])  # wrk --version answers with status 1: it started


@pytest.mark.parametrize("kind", ["missing", "not executable", "a folder"])
def test_a_local_wrk_that_does_not_start_is_said_naming_its_key(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "wrk"
    if kind == "not executable":
        path.write_text("#!/bin/sh\nexit 0\n")
        os.chmod(path, 0o644)
    elif kind == "a folder":
        path.mkdir()
    with pytest.raises(HarnessError) as caught:
        machines.check_clients([ClientSection(), ClientSection(wrk=str(path))])
    said = caught.value.message
    assert said.startswith(f"client.1.wrk '{path}' cannot be started on this machine: "), said
    assert "\n" not in said and "[[client]] wrk" in caught.value.hint


class _Remote(Machine):
    """A client over ssh whose shell answers `status` for any command."""

    status = 127

    def run(self, argv: Sequence[str | Path], *, timeout: float, check: bool = True,
            input: str | None = None) -> proc.Result:
        return proc.Result(tuple(str(a) for a in argv), self.status, "", "sh: 1: wrk: not found")


@pytest.mark.parametrize(("status", "said"), [(127, "is not found"), (126, "is not executable")])
def test_a_remote_wrk_the_shell_cannot_start_is_said(monkeypatch: pytest.MonkeyPatch, status: int, said: str) -> None:
    monkeypatch.setattr(_Remote, "status", status)
    monkeypatch.setattr(machines, "machine", lambda host: _Remote(host))
    with pytest.raises(HarnessError, match=rf"^client\.0\.wrk '/opt/wrk' {said} on client1$"):
        machines.check_clients([ClientSection(host="client1", wrk="/opt/wrk")])


@pytest.mark.parametrize("status", [0, 1, 255])
def test_a_remote_wrk_that_started_or_an_unreachable_client_is_left_to_the_sweep(monkeypatch: pytest.MonkeyPatch,
                                                                                 status: int) -> None:
    """wrk's own status 1 (its --version), and ssh's 255 (not reached: the sweep says so for each point)."""
    monkeypatch.setattr(_Remote, "status", status)
    monkeypatch.setattr(machines, "machine", lambda host: _Remote(host))
    machines.check_clients([ClientSection(host="client1", wrk="/opt/wrk")])
