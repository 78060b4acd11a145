"""A colleague's run folder, report folder or host tree that would cost minutes, read through a link, or
leave a report half rewritten, each tried through the real command (tests/hostile_kit.py runs and checks
every case: its exit code, one error line and a hint, nothing changed outside what it may write).

- **Bounded**: a profile of 64,000 distinct leaves is answered in seconds (it took 128 s when the growers
  summed each profile's leaves once per leaf, past the kit's 60 s); a name, a command line or a key of
  megabytes within the manifest's 64 MiB cap is refused naming its key (rundir/manifest_values.py).
- **Read where it is**: a run folder's manifest, records or profile that is a symlink (out of the folder),
  a hard link, a FIFO or a device node, or reached through a linked profiles/ folder, is refused naming
  the file (userfile.read_inside). `report --out` checks every file it will write, the flame graphs'
  too, before it writes the first: a folder planted at the last leaves the earlier report as it was.
- **The journal**: one of gigabytes, or with a record over 64 KiB, is refused in one line; one the
  harness grew past the old 1 MiB cap with its own calls is read back by host-restore."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests import hostile_kit
from tests.hostile_kit import (
    GOOD_MANIFEST,
    GOOD_RECORDS,
    Build,
    Case,
    Outcomes,
    S,
    a_run_dir,
    both,
    fifo_at,
    snapshot_host,
    snapshot_with,
    with_file,
)
from tests.unit import profile_fixtures as fx
from tests.unit.test_hostile_writes import hardlink, marked, sparse, symlink

BIG = 10 << 20  # characters: a name of 10 MB is no name


def manifest(**changes: object) -> str:
    """The kit's manifest, its second instance changed (`changes`: its keys), or `study`/`key` set."""
    data = json.loads(GOOD_MANIFEST)
    study, key = changes.pop("study", None), changes.pop("key", None)
    data["config"]["instance"][1].update(changes)
    if study is not None:
        data["config"]["study"] = {"switches": [study]}
    if key is not None:
        data["config"]["instance"][1][key] = "on"
    return json.dumps(data)


def profiled(leaves: int) -> Build:
    """The kit's run folder with a profiled point of each instance: `leaves` distinct functions of the
    server, b's syscall entry three times dearer (the one function that grew)."""
    def build(cwd: Path) -> None:
        run = cwd / "rd"
        many = {f"nginx;ngx_worker;ngx_http_process_request;server_function_{i:07d}": 1 for i in range(leaves)}
        base = {**{s: 10 * n for s, n in fx.BASE.items()}, **many}  # the entry's share grows by 1.6 points
        recs = [fx.write(run, "a", {**base}, 10000, 1000.0, conns=2),
                fx.write(run, "b", fx.scaled(base, 1.0, enter=3.0), 10000, 900.0, conns=2)]
        a_run_dir(GOOD_MANIFEST, GOOD_RECORDS + "".join(json.dumps(r) + "\n" for r in recs))(cwd)
    return build


def device_at(rel: str) -> Build:
    """A character device node (/dev/null's numbers) at `rel`: opening one can act on the device."""
    def build(cwd: Path) -> None:
        os.mknod(cwd / rel, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    return build


def moved(rel: str, to: str) -> Build:
    def build(cwd: Path) -> None:
        os.replace(cwd / rel, cwd / to)
    return build


def fake_inferno(cwd: Path) -> None:
    """inferno's two programs, on the case's PATH (bin/): each drawing a small SVG."""
    for name in ("inferno-diff-folded", "inferno-flamegraph"):
        path = cwd / "bin" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("#!/bin/sh\n" + ("head -1 \"$2\"\n" if name.endswith("folded") else "echo '<svg/>'\n"))
        path.chmod(0o755)


def grown_journal(cwd: Path) -> None:
    """A journal past 1 MiB made by the harness's own call: 600 IRQ records of a host of 1,024 CPUs."""
    from vmharness.journal import journal
    from vmharness.system.root import HostRoot

    snapshot_host(cwd)
    root = HostRoot(cwd / "snap", allow_writes=True)
    spread = ",".join(str(c) for c in range(0, 1024, 2))
    for n in range(600):
        journal.record(root, {"op": "irq", "irq": 100 + n, "name": f"vfio-msix[{n}](0000:b3:00.0)", "before": spread,
                              "after": "11"}, "host-prepare")
    assert (cwd / "snap/run/vmharness/journal.jsonl").stat().st_size > 1 << 20


RD = a_run_dir(GOOD_MANIFEST, GOOD_RECORDS)
PROFILED = profiled(3)
REPORT = ("report", "rd")
FULL = (*REPORT, "--full")  # the detail (a profile's growers, each instance's saturation point) is in the full text
WITH_INFERNO = {"PATH": "bin:" + os.environ.get("PATH", "/usr/bin:/bin")}

CASES = [
    # bounded: seconds, not minutes
    Case("report-a-profile-of-64000-leaves", FULL, ("b: grew most per request", "syscall_enter_from_user_mode"),
         profiled(64_000), code=0),
    Case("report-manifest-an-instance-name-of-10-mb", REPORT, ("config.instance[1].name", "not a name"),
         a_run_dir(manifest(name="b" * BIG), GOOD_RECORDS)),
    Case("report-manifest-an-instance-name-of-64-characters", REPORT, ("config.instance[1].name", "not a name"),
         a_run_dir(manifest(name="b" * 64), GOOD_RECORDS)),
    Case("report-manifest-an-instance-name-of-63-characters", FULL, ("baseline a: saturation point",),
         a_run_dir(manifest(name="b" * 63), GOOD_RECORDS), code=0),
    Case("report-manifest-a-cmdline-of-10-mb", REPORT, ("config.instance[1].cmdline", "at most 65,536"),
         a_run_dir(manifest(cmdline="pti=on " * (BIG // 7)), GOOD_RECORDS)),
    Case("report-manifest-a-switch-name-of-10-mb", REPORT, ("config.study.switches[0]", "not a name"),
         a_run_dir(manifest(study="s" * BIG), GOOD_RECORDS)),
    Case("report-manifest-a-key-of-10-mb", REPORT, ("a key of 10,485,760 characters", "config.instance[1]"),
         a_run_dir(manifest(key="k" * BIG), GOOD_RECORDS)),
    Case("compare-manifest-a-machine-of-10-mb", ("compare", "rd", "rd"), ("machines.server.machine", "65,536"),
         a_run_dir(GOOD_MANIFEST[:-1] + f', "machines": {{"server": {{"machine": "{"m" * BIG}"}}}}}}', GOOD_RECORDS)),
    # a run folder's files are read where they are: no link of either kind, nothing but a regular file
    Case("report-records-a-symlink-out-of-the-folder", REPORT, ("rd/records.jsonl", "symlink"),
         both(a_run_dir(GOOD_MANIFEST), with_file("canary.jsonl", GOOD_RECORDS),
              symlink("rd/records.jsonl", "../canary.jsonl"))),
    Case("report-manifest-a-symlink-out-of-the-folder", REPORT, ("rd/manifest.json", "symlink"),
         both(with_file("canary.json", GOOD_MANIFEST), with_file("rd/records.jsonl", GOOD_RECORDS),
              symlink("rd/manifest.json", "../canary.json"))),
    Case("report-records-a-hard-link", REPORT, ("rd/records.jsonl", "hard link"),
         both(a_run_dir(GOOD_MANIFEST), hardlink("rd/records.jsonl", "canary.jsonl", GOOD_RECORDS))),
    Case("report-manifest-a-hard-link", REPORT, ("rd/manifest.json", "hard link"),
         both(with_file("rd/records.jsonl", GOOD_RECORDS), hardlink("rd/manifest.json", "canary.json", GOOD_MANIFEST))),
    Case("report-records-a-fifo", REPORT, ("rd/records.jsonl", "FIFO"), both(a_run_dir(GOOD_MANIFEST),
                                                                             fifo_at("rd/records.jsonl"))),
    Case("report-records-a-device-node", REPORT, ("rd/records.jsonl", "device node"),
         both(a_run_dir(GOOD_MANIFEST), device_at("rd/records.jsonl"))),
    Case("compare-records-a-symlink", ("compare", "rd", "rd"), ("rd/records.jsonl", "symlink"),
         both(a_run_dir(GOOD_MANIFEST), with_file("canary.jsonl", GOOD_RECORDS),
              symlink("rd/records.jsonl", "../canary.jsonl"))),
    Case("report-a-profile-a-hard-link", REPORT, ("b-0.folded", "hard link"),
         both(PROFILED, lambda d: os.link(d / "rd/profiles/b-0.folded", d / "canary.folded"))),
    Case("report-profiles-a-symlinked-folder", REPORT, ("rd/profiles", "symlink"),
         both(PROFILED, moved("rd/profiles", "elsewhere"), symlink("rd/profiles", "../elsewhere"))),
    Case("report-a-profile-a-fifo", REPORT, ("b-0.folded", "FIFO"),
         both(PROFILED, lambda d: (d / "rd/profiles/b-0.folded").unlink(), fifo_at("rd/profiles/b-0.folded"))),
    # report --out: every target checked before the first is written
    Case("report-out-a-folder-at-a-flame-graph", ("report", "rd", "--out", "out"), ("flame-b.svg", "a folder"),
         both(PROFILED, marked("out", "report"), with_file("out/report.txt", "an older report\n"),
              with_file("out/flame-b.svg/keep.txt", "keep\n"), fake_inferno), env=WITH_INFERNO),
    Case("report-out-a-folder-at-a-flame-graph-with-force", ("report", "rd", "--out", "out", "--force"),
         ("flame-b.svg", "a folder"),
         both(PROFILED, marked("out", "report"), with_file("out/report.txt", "an older report\n"),
              with_file("out/flame-b.svg/keep.txt", "keep\n"), fake_inferno), env=WITH_INFERNO),
    Case("report-out-a-symlink-at-a-flame-graph", ("report", "rd", "--out", "out"), ("flame-b.svg", "symlink"),
         both(PROFILED, marked("out", "report"), with_file("out/report.txt", "an older report\n"),
              with_file("canary.svg", "keep\n"), symlink("out/flame-b.svg", "../canary.svg"), fake_inferno),
         env=WITH_INFERNO),
    Case("report-out-with-flame-graphs", ("report", "rd", "--out", "out"), ("wrote", "flame-b.svg"),
         both(PROFILED, marked("out", "report"), fake_inferno), env=WITH_INFERNO, code=0, may_write=("out",)),
    # the journal: the harness's own is read back, a hostile one refused in one line
    Case("restore-a-journal-of-gigabytes", ("host-restore", *S, "--dry-run"),
         ("journal.jsonl", "larger than 67108864 bytes"), both(snapshot_host, sparse("snap/run/vmharness/journal.jsonl",
                                                                                       3 << 30))),
    Case("restore-a-journal-record-of-100-kib", ("host-restore", *S, "--dry-run"),
         ("journal.jsonl", "line 1", "at most 65,536 bytes"),
         snapshot_with("run/vmharness/journal.jsonl", json.dumps(
             {"seq": 1, "op": "irq", "irq": 100, "name": "vfio-msix[0](0000:b3:00.0)", "before": "0," * (50 << 10),
              "after": "11", "owner": "host-prepare", "time": 1}) + "\n")),
    Case("restore-a-journal-the-harness-grew-past-1-mib", ("host-restore", *S, "--dry-run"),
         ("IRQ 699 vfio-msix[599](0000:b3:00.0) back on CPUs",), grown_journal, code=0),
]

outcomes = hostile_kit.fixture(CASES)


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_costly_or_linked_input_is_answered_in_seconds_or_refused(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])


def test_a_refused_report_left_the_earlier_one_as_it_was_and_a_good_one_drew_the_flame_graph(
        outcomes: Outcomes) -> None:
    """The kit's comparison of the working folder says nothing changed; said here for the report folder."""
    for case in ("report-out-a-folder-at-a-flame-graph", "report-out-a-folder-at-a-flame-graph-with-force"):
        o = outcomes.by_case[case]
        assert {k: v for k, v in o.after.items() if k.startswith("out/")} == \
            {k: v for k, v in o.before.items() if k.startswith("out/")}
    good = outcomes.by_case["report-out-with-flame-graphs"]
    assert "out/flame-b.svg" in good.after and "out/report.html" in good.after
