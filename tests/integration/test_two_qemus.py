"""Two QEMUs in one `vmharness run`, for real: Debian 12's QEMU 7.2 and QEMU 10.0 from bookworm-backports
(unpacked beside it by `make qemu-10`: tests/fetch-qemu.sh), as two instances that differ only in
`qemu`, under TCG through libvirt. What must hold: each guest's QEMU process runs the binary its
instance names, as the host's /proc/PID/exe says while the run goes (watched from here, apart from the
harness) and as the session records say (the harness's own reading); the manifest holds each one's
version and the file's sha256; the report's variant check shows the QEMU difference. QEMU 10.0 missing
after `make test` is a failure, not a skip: the comparison is what this file is for."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests import qemu_kit
from vmharness.system import proc

pytestmark = [pytest.mark.integration, pytest.mark.vm]

PIDS = Path("/run/libvirt/qemu")  # libvirt's pid file of each running domain: NAME.pid
CONFIG = """[guest]
accel = "tcg"
vcpus = 1
memory = 768

[[instance]]
name = "qemu-7.2"
qemu = "{old}"

[[instance]]
name = "qemu-10.0"
qemu = "{new}"

[sweep]
connections = "2,8"
iterations = 1
duration = 2
warmup = 0
wait = 0

[load]
percents = []
capacity = 0

[tuning]
profile = "none"

[report]
figures = false
"""  # nothing here reads a figure (FIGURES_OFF, test_experiment.py); one boot of each: what is asserted
# is the binary each boot runs, which a second boot of each (as before) asserted again for some 30 s



class Watch(threading.Thread):
    """Every run guest's QEMU process seen while the run goes: pid -> the binary /proc/PID/exe names at
    the last look (seen once: `libvirtd`, read between libvirt's fork and its exec of the emulator)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, str] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            for pidfile in PIDS.glob("vmh-r*.pid"):
                try:
                    pid = int(pidfile.read_text().strip())
                    # read again at every look: just after the fork, before its exec, the process is libvirtd
                    self.seen[pid] = os.readlink(f"/proc/{pid}/exe")
                except (OSError, ValueError):  # between a guest's start and its pid file, or gone
                    continue


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_qemu_72_against_100_in_one_run(daemon: None, tmp_path: Path) -> None:
    new = qemu_kit.qemu_10()
    assert new is not None, f"QEMU 10.0 is not in {qemu_kit.QEMU_CACHE}: `make qemu-10` puts it there (make test does)"
    old = str(Path(qemu_kit.REAL).resolve())
    cfg = tmp_path / "two-qemus.toml"
    cfg.write_text(CONFIG.format(old=old, new=new))
    run = tmp_path / "run"
    watch = Watch()
    watch.start()
    try:
        res = proc.run([sys.executable, "-m", "vmharness.cli", "run", str(cfg), "--out", str(run)], timeout=1500,
                       check=False)
    finally:
        watch.done.set()
        watch.join()
    print(res.stderr[-4000:], res.stdout, sep="\n")
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout
    # from the host, apart from the harness: a boot of each, its process running its instance's QEMU
    assert sorted(watch.seen.values()) == sorted([old, str(new)]), watch.seen
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    manifest: dict[str, Any] = json.loads((run / "manifest.json").read_text())
    named = {"qemu-7.2": (old, "7.2."), "qemu-10.0": (str(new), "10.0.")}
    for name, (path, version) in named.items():
        rec = manifest["qemu"][name]
        assert rec["real"] == path and rec["version"].startswith(version) and rec["sha256"] == _sha256(path), rec
    sessions = [r for r in records if r["kind"] == "session"]
    assert sorted(s["instance"] for s in sessions) == ["qemu-10.0", "qemu-7.2"]
    for s in sessions:
        assert s["ok"] and s["riders"] == [] and s["qemu"]["exe"] == named[s["instance"]][0], s
        assert s["qemu"]["sha256"] == manifest["qemu"][s["instance"]]["sha256"]
    points = [r for r in records if r["kind"] == "measurement"]
    assert len(points) == 2 * 2 and all(r["ok"] and r["client"]["requests"] > 0 for r in points)
    xml = (run / "domains" / "qemu-10.0.xml").read_text()
    assert f"<emulator>{new}</emulator>" in xml
    full = (run / "report" / "report.txt").read_text()  # the variant check's lines: the full text, not the terminal's
    assert "QEMU: QEMU 7.2." in full and "-> QEMU 10.0." in full, full
