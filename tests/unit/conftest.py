from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.fakehost import FakeHost
from tests.rig import failures, topology
from tests.rig import rig as rig_module
from tests.rig.qga import GuestAgent
from tests.streams import shares_state
from vmharness.cli.main import main

# No deadline for any property: the unit tier runs beside the rig's TCG guest on two cores, where an
# example's wall time measures the machine's load, not the code. A property that must be quick says
# so with its own measure (CPU time), not Hypothesis's 200 ms of wall time.
settings.register_profile("unit", deadline=None)
settings.load_profile("unit")

@pytest.fixture(autouse=True)
def _own_tmpdir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> None:
    """$TMPDIR, for this process and what it starts, a folder of the test's own, unless the test is
    one of those that use this machine's /tmp itself: `make check` runs the others beside those
    (tests/streams.py), and the report's flame graphs, drawn in a folder under $TMPDIR, would appear in
    /tmp while one of them looked."""
    if not shares_state(request.node.path.stem):
        folder = str(tmp_path_factory.mktemp("tmpdir"))
        monkeypatch.setenv("TMPDIR", folder)
        monkeypatch.setattr(tempfile, "tempdir", folder)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "root")


class Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *argv: str) -> dict[str, Any]:
        code, out, err = self(*argv, "--json")
        assert err == "", err
        data: dict[str, Any] = json.loads(out)
        data["_exit"] = code
        return data


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)


@pytest.fixture(autouse=True)
def _own_kvm_memo(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The KVM probe's kept answer (host/inspect/kvm_memo.py) in a folder of the test's own: a unit test
    that probes with a stand-in for QEMU must neither take this machine's answer nor leave its own."""
    from vmharness.host.inspect import kvm_memo

    monkeypatch.setattr(kvm_memo, "STATE_DIR", tmp_path_factory.mktemp("run-vmharness"))


@pytest.fixture
def stand_in_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[rig_module.Rig]:
    """A Rig for the rig's unit tests: its QEMU a stand-in that QMP's quit ends, no QMP or sysrq, its agent
    on the socket tests/unit/fake_agent.py serves (not yet served), failures' kept console in tmp_path."""
    monkeypatch.setattr(failures, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(rig_module, "sysrq", lambda path, key, timeout: None)
    monkeypatch.setattr(rig_module, "SYSRQ_WAIT", 0.0)
    qemu = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(rig_module, "quit_qemu", lambda path, timeout: qemu.kill())
    monkeypatch.setattr(rig_module, "where_cpus", lambda path, timeout: "CPU#0 HLT=1")
    rig = rig_module.Rig(None, topology.Files(tmp_path), qemu)  # type: ignore[arg-type]
    rig.agent = GuestAgent(tmp_path / "agent.sock", silence=5.0)
    try:
        yield rig
    finally:
        qemu.kill()
        qemu.wait()
        rig._stopped = True
