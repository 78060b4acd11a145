"""Writes through links, writes into folders the harness did not make, reads without a cap, and a
journal that names a file outside the harness's folders: each tried as a careless or hostile user
would, through the real command (tests/hostile_kit.py runs and checks every case).

Every link target and canary sits in the case's own folder beside the path the case aims at, so the
kit's byte-for-byte comparison of that folder proves it unchanged. Where a refusal has a legitimate
counterpart (a report into its own folder again, `--force`, a snapshot over an earlier one), that
case is here too, with exit 0 and only the files it may write changed."""

from __future__ import annotations

import os
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
    bench_toml,
    both,
    fifo_at,
    snapshot_host,
    snapshot_with,
    with_file,
)

RUN_MANIFEST = GOOD_MANIFEST.replace('"kind": "bench"', '"kind": "run"')
REPORT_FILES = ("report.txt", "report.md", "report.csv", "report.json", "report.tex", "report.html",
                "throughput.pdf", "latency.pdf", "throughput.png",
                "throughput.svg", "latency.png", "latency.svg", "forest.pdf", "forest.png", "forest.svg")


def hardlink(link: str, target: str, content: str = "canary\n") -> Build:
    """`target` (a canary) and `link`, a second name of the same file."""
    def build(cwd: Path) -> None:
        with_file(target, content)(cwd)
        (cwd / link).parent.mkdir(parents=True, exist_ok=True)
        os.link(cwd / target, cwd / link)
    return build


def symlink(link: str, target: str) -> Build:
    """`link` pointing at `target` (relative to the link's folder), which must exist already."""
    def build(cwd: Path) -> None:
        (cwd / link).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, cwd / link)
    return build


def sparse(rel: str, size: int) -> Build:
    def build(cwd: Path) -> None:
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(cwd / rel, "wb") as f:
            f.truncate(size)
    return build


def marked(folder: str, owner: str) -> Build:
    return with_file(f"{folder}/.vmharness", f"vmharness {owner}\n")


def a_run(manifest: str = GOOD_MANIFEST, records: bool = True, samples: bool = True) -> Build:
    """A run directory `rd` that bench (or run) could resume: manifest, records, samples/."""
    def build(cwd: Path) -> None:
        a_run_dir(manifest, GOOD_RECORDS if records else None)(cwd)
        if samples:
            (cwd / "rd/samples").mkdir()
    return build


def earlier_snapshot(cwd: Path) -> None:
    from vmharness.host.snapshot import snapshot
    from vmharness.system.root import HostRoot

    snapshot_host(cwd)
    snapshot.write(HostRoot(cwd / "snap"), cwd / "s.tgz")


def journal_naming(path: str) -> Build:
    return snapshot_with("run/vmharness/journal.jsonl",
                         f'{{"seq": 1, "op": "file", "path": "{path}", "ssh": null, "owner": "run:0123456789", '
                         '"time": 1}\n')


RD = a_run_dir(GOOD_MANIFEST, GOOD_RECORDS)
OWN_OUT = both(RD, marked("out", "report"))
IMAGE = ("image", "build", "--image-dir")

CASES = [
    # report --out: links, folders of someone else's, kernel filesystems
    Case("report-out-file-a-hard-link", ("report", "rd", "--out", "out"), ("report.txt", "hard link"),
         both(OWN_OUT, hardlink("out/report.txt", "canary.txt"))),
    Case("report-out-file-a-symlink", ("report", "rd", "--out", "out"), ("report.md", "symlink"),
         both(OWN_OUT, with_file("canary.md", "mine\n"), symlink("out/report.md", "../canary.md"))),
    Case("report-out-figure-a-hard-link", ("report", "rd", "--out", "out"), ("throughput.svg", "hard link"),
         both(OWN_OUT, hardlink("out/throughput.svg", "canary.svg"))),
    Case("report-out-a-symlinked-folder", ("report", "rd", "--out", "out"), ("--out out", "symlink"),
         both(RD, marked("elsewhere", "report"), with_file("elsewhere/report.txt", "keep\n"),
              symlink("out", "elsewhere"))),
    Case("report-out-a-users-folder", ("report", "rd", "--out", "mine"), ("mine", "did not make", "report.md"),
         both(RD, with_file("mine/report.md", "# my own notes\n"))),
    Case("report-out-another-commands-folder", ("report", "rd", "--out", "imgs"), ("imgs", "image build"),
         both(RD, marked("imgs", "image build"))),
    Case("report-out-the-run-directory", ("report", "rd", "--out", "rd"), ("rd", "did not make"), RD),
    Case("report-out-under-proc", ("report", "rd", "--out", "/proc/vmh-report"), ("/proc",), RD),
    Case("report-out-under-sys", ("report", "rd", "--out", "/sys/kernel/vmh-report"), ("/sys",), RD),
    Case("report-force-without-out", ("report", "rd", "--force"), ("--force",), RD),
    Case("compare-out-file-a-hard-link", ("compare", "rd", "--out", "out"), ("report.json", "hard link"),
         both(OWN_OUT, hardlink("out/report.json", "canary.json"))),
    # ... and their legitimate counterparts
    Case("report-again-into-its-own-folder", ("report", "rd", "--out", "out"), ("wrote", "out"),
         both(OWN_OUT, with_file("out/report.txt", "an older report\n")), code=0, may_write=("out",)),
    Case("report-force-replaces-a-hard-link", ("report", "rd", "--out", "out", "--force"), ("wrote", "out"),
         both(OWN_OUT, hardlink("out/report.txt", "canary.txt")), code=0, may_write=("out",)),
    Case("report-force-into-a-users-folder", ("report", "rd", "--out", "mine", "--force"), ("wrote", "mine"),
         both(RD, with_file("mine/notes.txt", "mine\n")), code=0,
         may_write=tuple(f"mine/{name}" for name in REPORT_FILES)),  # no marker: still not the harness's
    # bench and run --resume: what they append to and replace
    Case("bench-resume-records-a-symlink", ("bench", "--resume", "rd"), ("records.jsonl", "symlink"),
         both(a_run(records=False), with_file("canary.jsonl", GOOD_RECORDS),
              symlink("rd/records.jsonl", "../canary.jsonl"))),
    Case("bench-resume-records-a-hard-link", ("bench", "--resume", "rd"), ("records.jsonl", "hard link"),
         both(a_run(records=False), hardlink("rd/records.jsonl", "canary.jsonl", GOOD_RECORDS))),
    Case("bench-resume-manifest-a-symlink", ("bench", "--resume", "rd"), ("manifest.json", "symlink"),
         both(a_run(), with_file("canary.json", GOOD_MANIFEST), lambda d: (d / "rd/manifest.json").unlink(),
              symlink("rd/manifest.json", "../canary.json"))),
    Case("bench-resume-manifest-a-hard-link", ("bench", "--resume", "rd"), ("manifest.json", "hard link"),
         both(a_run(), lambda d: os.link(d / "rd/manifest.json", d / "canary.json"))),
    Case("bench-resume-a-samples-file-a-symlink", ("bench", "--resume", "rd"), ("x.txt", "symlink"),
         both(a_run(), with_file("canary.txt", "keep\n"), symlink("rd/samples/x.txt", "../../canary.txt"))),
    Case("bench-resume-samples-a-symlink", ("bench", "--resume", "rd"), ("samples", "symlink"),
         both(a_run(samples=False), with_file("elsewhere/keep.txt", "keep\n"), symlink("rd/samples", "../elsewhere"))),
    Case("bench-resume-without-samples", ("bench", "--resume", "rd"), ("--resume rd", "samples/"),
         a_run(samples=False)),
    Case("bench-resume-a-symlinked-run", ("bench", "--resume", "lnk"), ("lnk", "symlink"),
         both(a_run(), symlink("lnk", "rd"))),
    Case("bench-resume-a-run-folder", ("bench", "--resume", "rd"), ("vmharness run", "not `vmharness bench`"),
         a_run(RUN_MANIFEST)),
    Case("bench-resume-an-unknown-kind", ("bench", "--resume", "rd"), ("kind", "'frob'"),
         a_run(GOOD_MANIFEST.replace('"kind": "bench"', '"kind": "frob"'))),
    Case("bench-resume-another-commands-folder", ("bench", "--resume", "rd"), ("report",),
         both(a_run(), marked("rd", "report"))),
    Case("run-resume-records-a-hard-link", ("run", "--resume", "rd"), ("records.jsonl", "hard link"),
         both(a_run(RUN_MANIFEST, records=False), hardlink("rd/records.jsonl", "canary.jsonl", GOOD_RECORDS))),
    Case("run-resume-a-users-report-folder", ("run", "--resume", "rd"), ("rd/report", "did not make"),
         both(a_run(RUN_MANIFEST), with_file("rd/report/notes.md", "mine\n"))),
    Case("run-resume-without-samples", ("run", "--resume", "rd"), ("samples/",), a_run(RUN_MANIFEST, samples=False)),
    # host-snapshot FILE
    Case("snapshot-over-a-users-file", ("host-snapshot", *S, "notes.txt"), ("notes.txt", "not a snapshot"),
         both(snapshot_host, with_file("notes.txt", "my notes\n"))),
    Case("snapshot-over-a-symlink", ("host-snapshot", *S, "s.tgz"), ("s.tgz", "symlink"),
         both(snapshot_host, with_file("canary.txt", "keep\n"), symlink("s.tgz", "canary.txt"))),
    Case("snapshot-over-a-hard-link", ("host-snapshot", *S, "s.tgz"), ("s.tgz", "hard link"),
         both(snapshot_host, hardlink("s.tgz", "canary.txt"))),
    Case("snapshot-over-a-fifo", ("host-snapshot", *S, "s.tgz"), ("s.tgz", "not a regular file"),
         both(snapshot_host, fifo_at("s.tgz"))),
    Case("snapshot-over-an-earlier-snapshot", ("host-snapshot", *S, "s.tgz"), ("wrote s.tgz",), earlier_snapshot,
         code=0, may_write=("s.tgz",)),
    Case("snapshot-force-over-a-users-file", ("host-snapshot", *S, "notes.txt", "--force"), ("wrote notes.txt",),
         both(snapshot_host, with_file("notes.txt", "my notes\n")), code=0, may_write=("notes.txt",)),
    Case("snapshot-force-over-a-symlink", ("host-snapshot", *S, "s.tgz", "--force"), ("wrote s.tgz",),
         both(snapshot_host, with_file("canary.txt", "keep\n"), symlink("s.tgz", "canary.txt")), code=0,
         may_write=("s.tgz",)),
    # --image-dir (and VMHARNESS_IMAGE_DIR)
    Case("image-dir-under-proc", (*IMAGE, "/proc/vmh-images"), ("--image-dir", "/proc")),
    Case("image-dir-under-sys", (*IMAGE, "/sys/kernel/vmh-images"), ("--image-dir", "/sys")),
    Case("image-dir-a-file", (*IMAGE, "f"), ("--image-dir f", "not a folder"), with_file("f", "x")),
    Case("image-dir-a-users-folder", (*IMAGE, "mine"), ("mine", "did not make"), with_file("mine/notes.txt", "x")),
    Case("image-dir-a-symlink", (*IMAGE, "lnk"), ("lnk", "symlink"),
         both(with_file("elsewhere/notes.txt", "x"), symlink("lnk", "elsewhere"))),
    Case("image-dir-env-under-proc", ("image", "build"), ("VMHARNESS_IMAGE_DIR", "/proc"),
         env={"VMHARNESS_IMAGE_DIR": "/proc/self/vmh-images"}),
    # reads: a cap the error names, regular files only
    Case("bench-nginx-config-dev-zero", ("bench", "c.toml"), ("instance a: config", "/dev/zero", "device node"),
         bench_toml('[[instance]]\nname = "a"\nconfig = "/dev/zero"\n')),
    Case("bench-nginx-config-a-fifo", ("bench", "c.toml"), ("instance a: config", "FIFO"),
         both(bench_toml('[[instance]]\nname = "a"\nconfig = "p"\n'), fifo_at("p"))),
    Case("bench-nginx-config-huge", ("bench", "c.toml"), ("instance a: config", "larger than 1048576 bytes"),
         both(bench_toml('[[instance]]\nname = "a"\nconfig = "big.conf"\n'), sparse("big.conf", 3 << 20))),
    Case("report-manifest-huge", ("report", "rd"), ("manifest.json", "larger than 67108864 bytes"),
         both(RD, sparse("rd/manifest.json", 65 << 20))),
    Case("vm-up-image-json-a-fifo", ("vm", "up", *S, "--print-xml", "--image", "img"), ("image.json", "FIFO"),
         both(snapshot_host, fifo_at("img/image.json"))),
    Case("vm-up-image-json-huge", ("vm", "up", *S, "--print-xml", "--image", "img"), ("image.json", "larger than"),
         both(snapshot_host, sparse("img/image.json", 2 << 20))),
    # the journal's undo removes only the harness's own files: any other is named and kept (exit 1)
    Case("restore-journal-names-etc-passwd", ("host-restore", *S, "--dry-run"), ("KEPT", "/etc/passwd"),
         journal_naming("/etc/passwd"), code=1),
    Case("restore-journal-names-a-path-that-climbs-out", ("host-restore", *S, "--dry-run"),
         ("KEPT", "/var/lib/vmharness/vms/x/../../../../etc/shadow"),
         journal_naming("/var/lib/vmharness/vms/x/../../../../etc/shadow"), code=1),
    Case("restore-journal-names-another-tmp-file", ("host-restore", *S, "--dry-run"), ("KEPT", "/tmp/notes.lua"),
         journal_naming("/tmp/notes.lua"), code=1),
    Case("restore-journal-names-an-overlay", ("host-restore", *S, "--dry-run"),
         ("remove /var/lib/vmharness/vms/demo/overlay.qcow2",),
         journal_naming("/var/lib/vmharness/vms/demo/overlay.qcow2"), code=0),
]

outcomes = hostile_kit.fixture(CASES)


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_write_or_read_is_refused_or_made_safe(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])


def test_a_report_written_again_or_with_force_replaced_the_link_not_its_target(outcomes: Outcomes) -> None:
    """The counterparts wrote whole new files: the report's text is there, the hard link is gone."""
    for case in ("report-again-into-its-own-folder", "report-force-replaces-a-hard-link"):
        o = outcomes.by_case[case]
        assert o.after["out/report.txt"] != o.before["out/report.txt"]
        assert o.after.get("canary.txt", "") == o.before.get("canary.txt", "")
    forced = outcomes.by_case["report-force-into-a-users-folder"]
    assert ".vmharness" not in {k.split("/")[-1] for k in forced.after}, "--force does not make the folder ours"
    assert forced.after["mine/notes.txt"] == forced.before["mine/notes.txt"]
