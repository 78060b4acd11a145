"""Every command's output held byte for byte against a recorded set: `--help` of every command, the host
commands' text and `--json` on synthetic host trees, `run --print-xml`, and `report`/`compare` in every
format on run folders a real `run` (TCG, the demo's instances, two boots each) and a real `bench`
(loopback) wrote, kept as tarballs in tests/unit/golden/runs/. A change of
layout must not change a byte of what a user sees; a change of behaviour changes the recording on
purpose, in the same commit, where a reviewer sees the difference:

    VMHARNESS_GOLDEN_UPDATE=1 .venv/bin/pytest tests/unit/test_golden_cli.py

Each command runs in-process (`cli.main`) in a fixed working folder, so that paths, ids and times are
the same at every run; what a call makes up (a domain's UUID, a run id, a MAC, the folder pytest gave)
is replaced by a placeholder."""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.cli import main as cli
from vmharness.experiment import ops  # noqa: F401 - every journal op registered
from vmharness.journal import journal
from vmharness.system.root import HostRoot

GOLDEN = Path(__file__).parent / "golden" / "cli"
RUNS = Path(__file__).parent / "golden" / "runs"
UPDATE = os.environ.get("VMHARNESS_GOLDEN_UPDATE") == "1"
MLX, CX5 = 0x15B3, 0x1017
NIC, SIBLING, OTHER = "0000:b3:00.0", "0000:b3:00.1", "0000:00:02.0"
PAGES = "sys/devices/system/node/node{node}/hugepages/hugepages-{kib}kB"


def _host(base: Path) -> FakeHost:
    """Two nodes of four CPUs; a dual-port mlx5 NIC on node 1 (one IOMMU group), an e1000e on node 0
    carrying the default route."""
    h = FakeHost(base, nodes=2, cpus_per_node=4)
    h.pci(NIC, MLX, CX5, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f0",))
    h.pci(SIBLING, MLX, CX5, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f1",))
    h.pci(OTHER, 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
    h.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    h.address("eth0", "192.0.2.10", 24)
    h.finish()
    return h


def _prepared(base: Path) -> FakeHost:
    """The host after `host-prepare --bdf NIC --hugepages 8G`: both ports on vfio-pci, pages on node 1,
    their hugetlbfs mounted, and the journal that says so."""
    h = FakeHost(base, nodes=2, cpus_per_node=4)
    for bdf in (NIC, SIBLING):
        h.pci(bdf, MLX, CX5, driver="vfio-pci", group=40, numa=1, netdevs=())
    h.pci(OTHER, 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
    h.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
    d = PAGES.format(node=1, kib=2048)
    h.write(f"{d}/nr_hugepages", "4096\n")
    h.write(f"{d}/free_hugepages", "4096\n")
    h.mount("vmharness /run/vmharness/hugepages-2M hugetlbfs rw,relatime,pagesize=2M 0 0")
    h.finish()
    root = HostRoot(base, allow_writes=True)
    for bdf, named in ((NIC, True), (SIBLING, False)):
        journal.record(root, {"op": "bind", "bdf": bdf, "driver": "mlx5_core", "override": None, "netdevs": [],
                              "named": named}, "host-prepare")
    journal.record(root, {"op": "pages", "node": 1, "size_kib": 2048, "before": 0}, "host-prepare")
    journal.record(root, {"op": "mount", "path": "/run/vmharness/hugepages-2M", "created": True}, "host-prepare")
    return h


@dataclass(frozen=True)
class Scene:
    id: str
    argv: tuple[str, ...]
    files: tuple[str, ...] = ()  # files the command writes (under the working folder), held too


H = ("--host-root", "host")
P = ("--host-root", "prepared")
RUN, BENCH = "runs/run", "runs/bench"


def _help_scenes() -> Iterator[Scene]:
    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> Iterator[Scene]:
        yield Scene("help-" + ("-".join(words) or "vmharness"), (*words, "--help"))
        for name, sub in sorted(cli.subcommands(parser).items()):
            yield from walk(sub, (*words, name))
    yield from walk(cli.build_parser(), ())


def _scenes() -> list[Scene]:
    report_files = tuple(f"out/report.{x}" for x in ("txt", "md", "csv", "json", "tex", "html"))
    return [
        *_help_scenes(),
        Scene("host-check", ("host-check", *H)),
        Scene("host-check-json", ("host-check", *H, "--json")),
        Scene("host-groups", ("host-groups", *H)),
        Scene("host-groups-json", ("host-groups", *H, "--json")),
        Scene("host-groups-bdf", ("host-groups", *H, "--bdf", "b3:00.1")),
        Scene("host-groups-class", ("host-groups", *H, "--class", "network")),
        Scene("host-groups-prepared", ("host-groups", *P)),
        Scene("host-prepare-dry", ("host-prepare", *H, "--dry-run", "--bdf", NIC, "--hugepages", "8G")),
        Scene("host-prepare-dry-json", ("host-prepare", *H, "--dry-run", "--bdf", NIC, "--hugepages", "2G",
                                        "--hugepage-size", "1G", "--json")),
        Scene("host-prepare-dry-route", ("host-prepare", *H, "--dry-run", "--bdf", OTHER)),
        Scene("host-prepare-dry-prepared", ("host-prepare", *P, "--dry-run", "--bdf", NIC)),
        Scene("host-restore-dry", ("host-restore", *P, "--dry-run")),
        Scene("host-restore-dry-nothing", ("host-restore", *H, "--dry-run")),
        Scene("host-setup", ("host-setup", *H, "--print", "--bdf", NIC, "--hugepages", "8G", "--hugepage-size",
                             "1G")),
        Scene("tune-plan", ("tune", "plan", *H, "--profile", "seeds")),
        Scene("tune-plan-json", ("tune", "plan", *H, "--profile", "seeds", "--json")),
        Scene("tune-show", ("tune", "show", *H)),
        Scene("run-print-xml", ("run", "--print-xml", *H)),
        Scene("run-print-xml-nic", ("run", "--print-xml", *H, "--bdf", NIC, "--hugepages")),
        Scene("run-print-xml-prepared", ("run", "--print-xml", *P)),
        Scene("report-run", ("report", RUN)),
        Scene("report-run-full", ("report", RUN, "--full")),
        Scene("report-run-markdown", ("report", RUN, "--format", "markdown")),
        Scene("report-run-csv", ("report", RUN, "--format", "csv")),
        Scene("report-run-latex", ("report", RUN, "--format", "latex")),
        Scene("report-run-json", ("report", RUN, "--json")),
        Scene("report-run-baseline-pti", ("report", RUN, "--baseline", "pti")),
        Scene("report-run-out", ("report", RUN, "--out", "out"), report_files),
        Scene("report-bench", ("report", BENCH)),
        Scene("report-bench-json", ("report", BENCH, "--format", "json")),
        Scene("compare", ("compare", RUN, BENCH)),
        Scene("compare-markdown", ("compare", RUN, BENCH, "--format", "markdown")),
        Scene("compare-latex", ("compare", RUN, BENCH, "--format", "latex")),
        # a few refusals, word for word
        Scene("error-bdf", ("host-groups", *H, "--bdf", "zz")),
        Scene("error-baseline", ("report", RUN, "--baseline", "nobody")),
        Scene("error-prepare-live-only", ("host-prepare", *H, "--bdf", NIC)),
        Scene("error-unknown", ("host-chekc",)),
    ]


SCENES = _scenes()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working folder every scene runs in: the two host trees and copies of the recorded runs."""
    base = tmp_path_factory.mktemp("golden")
    _host(base / "host")
    _prepared(base / "prepared")
    for name in ("run", "bench"):
        (base / "runs" / name).mkdir(parents=True)
        with tarfile.open(RUNS / f"{name}.tar.xz") as t:
            t.extractall(base / "runs" / name, filter="data")
    return base


def _stable(text: str, base: Path) -> str:
    text = text.replace(str(base), "<DIR>")
    text = re.sub(r"52:54:00(:[0-9a-f]{2}){3}", "<MAC>", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<UUID>", text)
    text = re.sub(r"(run:|vmh-r|\"r)[0-9a-f]{8,}", r"\1<ID>", text)
    # an SVG figure's date and the ids matplotlib salts afresh in every process
    text = re.sub(r"<dc:date>[^<]*</dc:date>", "<dc:date>DATE</dc:date>", text)
    text = re.sub(r"\b([pm])[0-9a-f]{10}\b", r"\1<SVGID>", text)
    # an HTML page's embedded figures: matplotlib's bytes are its own; their digest is held instead
    return re.sub(r"data:image/(png|svg\+xml);base64,([A-Za-z0-9+/=]+)",
                  lambda m: f"data:image/{m[1]};sha256={_digest(m[2])}", text)


def _digest(b64: str) -> str:
    return hashlib.sha256(base64.b64decode(b64)).hexdigest()[:16]


def _in(folder: Path) -> Callable[[], None]:
    old = Path.cwd()
    os.chdir(folder)
    return lambda: os.chdir(old)


@pytest.mark.parametrize("scene", SCENES, ids=[s.id for s in SCENES])
def test_output_is_as_recorded(scene: Scene, folder: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VMHARNESS_HOST_ROOT", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    back = _in(folder)
    try:
        shutil.rmtree("out", ignore_errors=True)
        code = cli.main(list(scene.argv))
        out = capsys.readouterr()
        parts = [f"exit: {code}", "--- stdout", out.out, "--- stderr", out.err]
        for name in scene.files:
            parts += [f"--- {name}", Path(name).read_bytes().decode()]
    finally:
        back()
    got = _stable("\n".join(parts), folder)
    path = GOLDEN / f"{scene.id}.txt"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_bytes(got.encode())
    assert path.exists(), f"no recording {path.name}: record with VMHARNESS_GOLDEN_UPDATE=1"
    assert got == path.read_bytes().decode(), f"{scene.id}: the output differs from {path}"


def test_every_recording_has_its_scene() -> None:
    """A recording left from a scene that is gone would hold nothing: each file is one scene's."""
    known = {f"{s.id}.txt" for s in SCENES}
    assert {p.name for p in GOLDEN.glob("*.txt")} <= known
