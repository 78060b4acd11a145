"""The one way to write into a folder a user named (vmharness/system/owned.py), and what uses it: a folder is
made and marked, or verified by its marker; a file is replaced by a rename (a link there is replaced,
never written through) or appended to only when it is a regular file with one name; another's folder
or file is refused unless --force. Also the run directory's resume checks, the cap on the reads of
a run's files, host-snapshot to stdout, and the journal's undo that removes only the harness's files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile_kit import GOOD_MANIFEST, GOOD_RECORDS, a_run_dir, snapshot_host
from vmharness.errors import HarnessError
from vmharness.journal import files, journal, restore
from vmharness.rundir.store import RECORDS, RunDir
from vmharness.system import owned
from vmharness.system.root import HostRoot

ME = "report"


def test_a_new_folder_is_made_with_its_parents_and_marked(tmp_path: Path) -> None:
    folder = owned.claim(tmp_path / "a" / "b", ME, "--out")
    assert (tmp_path / "a/b/.vmharness").read_text() == "vmharness report\n"
    assert owned.marked(tmp_path / "a" / "b") == ME
    assert folder.write("x.txt", b"one") == tmp_path / "a/b/x.txt"
    assert sorted(os.listdir(tmp_path / "a/b")) == [".vmharness", "x.txt"]  # no temporary file left


def test_an_empty_folder_is_taken_and_an_own_one_is_rewritten(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    owned.claim(tmp_path / "out", ME, "--out").write("r.txt", b"old")
    owned.claim(tmp_path / "out", ME, "--out").write("r.txt", b"new")  # its own folder: again, over its file
    assert (tmp_path / "out/r.txt").read_bytes() == b"new"


def test_a_folder_of_someone_elses_is_refused_unless_forced_and_then_not_marked(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    with pytest.raises(HarnessError, match=r"did not make \(it holds report\.md\)"):
        owned.claim(mine, ME, "--out")
    owned.claim(mine, ME, "--out", force=True).write("other.txt", b"x")
    assert (mine / "report.md").read_text() == "my notes" and owned.marked(mine) is None
    other = owned.claim(tmp_path / "imgs", "image build", "--image-dir")
    with pytest.raises(HarnessError, match="written by vmharness image build, not by vmharness report"):
        owned.claim(other.path, ME, "--out")


@pytest.mark.parametrize("where", ["/proc/vmh-x", "/sys/kernel/vmh-x", "/dev/vmh-x", "/proc/self"])
def test_a_kernel_filesystem_is_refused_even_with_force(where: str) -> None:
    with pytest.raises(HarnessError, match="the kernel's: refusing"):
        owned.claim(Path(where), ME, "--out", force=True)


def test_a_symlinked_folder_or_a_file_is_refused_even_with_force(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "lnk").symlink_to("real")
    (tmp_path / "f").write_text("x")
    with pytest.raises(HarnessError, match="lnk is a symlink"):
        owned.claim(tmp_path / "lnk", ME, "--out", force=True)
    with pytest.raises(HarnessError, match="exists and is not a folder"):
        owned.claim(tmp_path / "f", ME, "--out", force=True)
    assert os.listdir(tmp_path / "real") == [] and (tmp_path / "f").read_text() == "x"


def test_a_hard_link_is_refused_and_with_force_replaced_never_written_through(tmp_path: Path) -> None:
    folder = owned.claim(tmp_path / "out", ME, "--out")
    (tmp_path / "canary").write_text("keep")
    os.link(tmp_path / "canary", tmp_path / "out/r.txt")
    with pytest.raises(HarnessError, match=r"r.txt is a hard link \(one of 2 names"):
        folder.write("r.txt", b"x")
    owned.Folder(folder.path, "--out", force=True).write("r.txt", b"new")
    assert (tmp_path / "canary").read_text() == "keep" and (tmp_path / "out/r.txt").read_bytes() == b"new"


def test_a_symlink_is_refused_and_with_force_replaced_itself(tmp_path: Path) -> None:
    folder = owned.claim(tmp_path / "out", ME, "--out")
    (tmp_path / "canary").write_text("keep")
    (tmp_path / "out/r.txt").symlink_to("../canary")
    with pytest.raises(HarnessError, match=r"r\.txt is a symlink: refusing to write through it"):
        folder.write("r.txt", b"x")
    owned.Folder(folder.path, "--out", force=True).write("r.txt", b"new")
    assert (tmp_path / "canary").read_text() == "keep" and not (tmp_path / "out/r.txt").is_symlink()


def test_a_folder_or_fifo_at_a_name_is_refused_and_a_folder_even_with_force(tmp_path: Path) -> None:
    folder = owned.claim(tmp_path / "out", ME, "--out", force=True)
    (tmp_path / "out/d").mkdir()
    os.mkfifo(tmp_path / "out/p")
    with pytest.raises(HarnessError, match="d is a folder"):
        owned.Folder(folder.path, "--out", force=True).write("d", b"x")
    with pytest.raises(HarnessError, match="p is a FIFO"):
        owned.Folder(folder.path, "--out").write("p", b"x")


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    folder = owned.claim(tmp_path / "out", ME, "--out")
    (tmp_path / "canary").write_text("keep")
    (tmp_path / f"out/.r.txt.{os.getpid()}.tmp").symlink_to("../canary")
    folder.write("r.txt", b"x")
    assert (tmp_path / "canary").read_text() == "keep" and (tmp_path / "out/r.txt").read_bytes() == b"x"


def test_an_append_goes_only_to_a_regular_file_with_one_name(tmp_path: Path) -> None:
    folder = owned.claim(tmp_path / "out", ME, "--out", force=True)
    with folder.append("log") as fd:
        os.write(fd, b"a\n")
    with folder.append("log") as fd:
        os.write(fd, b"b\n")
    assert (tmp_path / "out/log").read_bytes() == b"a\nb\n"
    (tmp_path / "canary").write_text("keep")
    os.link(tmp_path / "canary", tmp_path / "out/hard")
    (tmp_path / "out/soft").symlink_to("../canary")
    os.mkfifo(tmp_path / "out/fifo")
    for name, what in (("hard", "hard link"), ("soft", "symlink"), ("fifo", "FIFO")):
        with pytest.raises(HarnessError, match=what), folder.append(name):  # --force never appends through
            pass
    assert (tmp_path / "canary").read_text() == "keep"


def test_a_subfolder_is_made_or_found_and_a_link_there_refused(tmp_path: Path) -> None:
    folder = owned.claim(tmp_path / "out", ME, "--out")
    assert folder.folder("s").path == tmp_path / "out/s" and (tmp_path / "out/s").is_dir()
    assert folder.folder("s", missing="make it").flag == "--out/s"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out/l").symlink_to("../elsewhere")
    with pytest.raises(HarnessError, match="l is a symlink"):
        folder.folder("l")
    with pytest.raises(HarnessError, match="has no none/ folder"):
        folder.folder("none", missing="make it")


def test_verify_takes_a_marked_or_legacy_folder_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old/manifest.json").write_text("{}")
    folder = owned.verify(tmp_path / "old", "bench", "--resume", lambda _p, e: "manifest.json" in e)
    assert owned.marked(folder.path) is None
    folder.mark("bench")
    assert owned.marked(folder.path) == "bench"
    with pytest.raises(HarnessError, match="does not exist"):
        owned.verify(tmp_path / "none", "bench", "--resume")
    with pytest.raises(HarnessError, match="written by vmharness bench, not by vmharness run"):
        owned.verify(tmp_path / "old", "run", "--resume")  # marked as bench's now: not run's


# the run directory ------------------------------------------------------------------------------
def test_a_good_run_directory_resumes_and_is_marked_and_appended_to(tmp_path: Path) -> None:
    a_run_dir(GOOD_MANIFEST, GOOD_RECORDS)(tmp_path)
    (tmp_path / "rd/samples").mkdir()
    run = RunDir.resume(tmp_path / "rd", "bench")
    assert owned.marked(run.path) == "bench"
    run.append({"kind": "note"})
    run.update_manifest(ended="now")
    assert (tmp_path / "rd" / RECORDS).read_text().startswith(GOOD_RECORDS)
    assert RunDir.resume(tmp_path / "rd", "bench").manifest["ended"] == "now"


def test_a_new_run_directory_is_marked_with_its_kind(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "new", {"kind": "run", "config": {"instance": []}})
    assert owned.marked(run.path) == "run" and (run.path / "samples").is_dir()
    with pytest.raises(HarnessError, match="written by `vmharness run`, not `vmharness bench`"):
        RunDir.resume(run.path, "bench")


def test_a_resume_refused_appends_nothing(tmp_path: Path) -> None:
    a_run_dir(GOOD_MANIFEST, GOOD_RECORDS)(tmp_path)
    with pytest.raises(HarnessError, match="has no samples/ folder"):
        RunDir.resume(tmp_path / "rd", "bench")
    assert (tmp_path / "rd" / RECORDS).read_text() == GOOD_RECORDS
    assert sorted(os.listdir(tmp_path / "rd")) == ["manifest.json", "records.jsonl"]


def test_a_huge_sparse_records_file_is_refused_at_once_naming_the_cap(cli, tmp_path: Path) -> None:
    a_run_dir(GOOD_MANIFEST)(tmp_path)
    with open(tmp_path / "rd" / RECORDS, "wb") as f:
        f.truncate(2 << 30)  # 2 GiB of nothing: it used to cost 34 s and 4.3 GB before a word
    started = time.process_time()  # this process's CPU time: reading the 2 GiB is what costs, not the load
    code, _, err = cli("report", str(tmp_path / "rd"))
    assert code == 2 and "records.jsonl is larger than 1073741824 bytes" in err.splitlines()[0]
    assert time.process_time() - started < 5


# host-snapshot -----------------------------------------------------------------------------------
def _snapshot(tmp_path: Path, stdout: int) -> subprocess.CompletedProcess[bytes]:
    snapshot_host(tmp_path)
    return subprocess.run([sys.executable, "-m", "vmharness.cli", "host-snapshot", "--host-root", "snap", "-"],
                          cwd=tmp_path, stdout=stdout, stderr=subprocess.PIPE, timeout=60, check=False)


def test_a_snapshot_to_stdout_is_the_tarball_alone_and_what_is_said_goes_to_stderr(tmp_path: Path) -> None:
    from vmharness.host.snapshot import snapshot

    res = _snapshot(tmp_path, subprocess.PIPE)
    assert res.returncode == 0, res.stderr
    assert res.stdout == snapshot.build(HostRoot(tmp_path / "snap"))
    said = res.stderr.decode().splitlines()
    assert said[0].startswith("wrote a snapshot") and "tar xzf host.tar.gz -C snap" in said[1]
    assert not (tmp_path / "-").exists()


def test_a_snapshot_to_a_terminal_is_refused(tmp_path: Path) -> None:
    leader, follower = os.openpty()
    try:
        res = _snapshot(tmp_path, follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert res.returncode == 2 and res.stderr.decode().startswith("error: host-snapshot -: stdout is a terminal")


# the journal's undo ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["canary", "x/../canary"])
def test_the_undo_never_removes_a_file_outside_the_harness_folders(tmp_path: Path, name: str) -> None:
    root = HostRoot(tmp_path / "root", allow_writes=True)
    canary = tmp_path / "canary"
    canary.write_text("keep")
    (tmp_path / "x").mkdir()
    outside = journal.record(root, {"op": "file", "path": str(tmp_path / name), "ssh": None}, "run:0123456789")
    ours = journal.record(root, {"op": "file", "path": f"{files.VM_DIR}/nonexistent-vmh-test/overlay.qcow2",
                                 "ssh": None}, "run:0123456789")
    assert [r["seq"] for r in restore.pending(root)] == [ours["seq"]]
    said: list[str] = []
    problems = restore.reclaim(root, said.append)
    assert canary.read_text() == "keep"
    assert len(problems) == 1 and f"record {outside['seq']}" in problems[0] and "it is kept" in problems[0]
    assert [r["seq"] for r in journal.outstanding(journal.read(root))] == [outside["seq"]]  # the journal keeps it
    undo = journal.OPS["file"].undo
    assert undo is not None and undo(root, outside) and canary.read_text() == "keep"  # itself refuses it too


def test_the_harness_never_journals_a_file_outside_its_folders(tmp_path: Path) -> None:
    from vmharness.system.machine import Machine

    root = HostRoot(tmp_path, allow_writes=True)
    with pytest.raises(RuntimeError, match="not where vmharness makes files"):
        files.made(root, Machine(), "/etc/passwd", "run:0123456789")
    assert files.ours(files.wrk_script("0123456789", 42)) and files.ours(f"{files.VM_DIR}/_run/overlay.qcow2")
    assert not any(files.ours(p) for p in ("/etc/passwd", f"{files.VM_DIR}/../x/overlay.qcow2",
                                           f"{files.VM_DIR}/a/b/overlay.qcow2", "/tmp/vmharness-report-x/../y.lua"))
