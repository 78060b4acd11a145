"""Reading several files in one command (batched.read_many), writing several and reading each back in
one (batched.write_many, ShellTarget.set_many), and a plan's first reads answered from one batch
(Prefetched): each file is answered as a read or write of its own would answer it (text stripped, None
when missing, the refusal of a file that is not regular or too big raised only when that file is read),
a path or a file's text is data, and a file read again is read again. Over a guest's agent each command
is a round trip of about 0.1 s; a plan reads a score of files and sets about ten."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from vmharness.errors import HarnessError
from vmharness.system import batched, proc
from vmharness.tune.access import IRQBALANCE_PIDS, Prefetched, ShellTarget

calls: list[list[str]] = []


def runner(argv: list[str], check: bool = False) -> proc.Result:
    calls.append(argv)
    return proc.run(argv, timeout=10, check=check)


def _target() -> ShellTarget:
    return ShellTarget("client:x", runner, {"kind": "ssh"})


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "plain").write_text("1024 65000\n")
    (tmp_path / "two lines").write_text("a\nb\n\n")
    (tmp_path / "empty").write_text("")
    (tmp_path / "no newline").write_text("never")
    (tmp_path / "a marker").write_text("@vmh-0123456789abcdef 3\n@vmh-0123456789abcdef end 0\nstill mine\n")
    (tmp_path / "$(touch pwned)").write_text("ok")
    (tmp_path / "big").write_text("x" * 200)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    return {name: str(tmp_path / name) for name in ("plain", "two lines", "empty", "no newline", "a marker",
                                                     "$(touch pwned)", "big", "fifo", "dir", "missing")}


def test_one_command_answers_each_file_as_its_own_read_would(files: dict[str, str]) -> None:
    calls.clear()
    got = batched.read_many(runner, list(files.values()), "m", limit=100)
    assert len(calls) == 1 and list(got) == list(files.values())
    by_name = {name: got[path] for name, path in files.items()}
    assert by_name["plain"] == "1024 65000" and by_name["two lines"] == "a\nb" and by_name["empty"] == ""
    assert by_name["no newline"] == "never" and by_name["$(touch pwned)"] == "ok" and by_name["missing"] is None
    assert by_name["a marker"] == "@vmh-0123456789abcdef 3\n@vmh-0123456789abcdef end 0\nstill mine"
    faults = (("fifo", "is not a regular file"), ("dir", "is not a regular file"), ("big", "larger than 100"))
    for name, fault in faults:
        refused = by_name[name]
        assert isinstance(refused, HarnessError) and fault in refused.message, name
    for name, path in files.items():  # what read_with says of each, alone
        try:
            alone: object = batched.read_with(lambda argv: proc.run(argv, timeout=10, check=False), path, "m", 100)
        except HarnessError as exc:
            alone = exc.message
        mine = by_name[name]
        assert (mine.message if isinstance(mine, HarnessError) else mine) == alone, name
    assert not (Path.cwd() / "pwned").exists()


def test_a_batch_cut_short_is_an_error_not_a_missing_file(files: dict[str, str]) -> None:
    def cut(argv: list[str]) -> proc.Result:
        res = proc.run(argv, timeout=10, check=False)
        return proc.Result(res.argv, 0, res.stdout[: len(res.stdout) // 2], "")

    with pytest.raises(HarnessError, match=r"its answer for .* is cut short"):
        batched.read_many(cut, list(files.values()), "m", limit=100)
    assert batched.read_many(cut, [], "m") == {}


def test_a_plans_first_reads_come_from_one_batch_and_a_second_read_is_fresh(files: dict[str, str]) -> None:
    t = Prefetched(_target(), _target().read_many([files["plain"], files["fifo"]]))
    calls.clear()
    assert t.read(files["plain"]) == "1024 65000" and calls == []
    Path(files["plain"]).write_text("0\n")
    assert t.read(files["plain"]) == "0" and len(calls) == 1  # read again: from the file
    with pytest.raises(HarnessError, match="fifo on client:x is not a regular file"):
        t.read(files["fifo"])  # the refusal, when it is read
    assert t.label == "client:x" and t.spec() == {"kind": "ssh"}


def test_a_write_is_read_back_in_the_same_command(files: dict[str, str]) -> None:
    t = Prefetched(_target(), _target().read_many([files["plain"]]))
    calls.clear()
    assert t.set_many([(files["plain"], "4096")]) == ["4096"] and len(calls) == 1
    assert Path(files["plain"]).read_text() == "4096\n"
    assert t.read(files["plain"]) == "4096"  # the batch's old answer was dropped by the write
    [refused] = t.set_many([(files["dir"], "1")])
    assert isinstance(refused, HarnessError)
    assert refused.message.startswith(f"the kernel rejected '1' for {files['dir']}: ")
    [odd] = t.set_many([("/dev/null", "1")])  # written, but not to be read back
    assert isinstance(odd, HarnessError) and "/dev/null on client:x is not a regular file" in odd.message


def test_a_batch_of_writes_is_one_command_and_the_first_refusal_ends_a_set(files: dict[str, str]) -> None:
    """Each answered as its write alone would be; a value or path is data (markers, quotes, `$(...)`)."""
    t = _target()
    pairs = [(files["plain"], "1 2"), (files["$(touch pwned)"], "@vmh-0123456789abcdef 5"),
             (files["empty"], "'\"$(touch pwned)"), (files["dir"], "3"), (files["no newline"], "4")]
    calls.clear()
    got = t.set_many(pairs)
    assert len(calls) == 1 and got[:3] == ["1 2", "@vmh-0123456789abcdef 5", "'\"$(touch pwned)"]
    assert len(got) == 4 and isinstance(got[3], HarnessError) and "rejected '3'" in got[3].message
    assert Path(files["no newline"]).read_text() == "never"  # after the refusal: not tried
    calls.clear()
    put = t.write_many([(files["dir"], "3"), (files["no newline"], "4"), (files["missing"] + "/x", "5")])
    assert len(calls) == 1 and put[1] is None and Path(files["no newline"]).read_text() == "4\n"
    assert [isinstance(a, HarnessError) for a in put] == [True, False, True]  # every one tried
    assert not (Path.cwd() / "pwned").exists()


def test_a_batch_of_writes_cut_short_is_an_error(files: dict[str, str]) -> None:
    def cut(argv: list[str]) -> proc.Result:
        res = proc.run(argv, timeout=10, check=False)
        return proc.Result(res.argv, 0, res.stdout[: len(res.stdout) * 2 // 3], "")

    pairs = [(files["plain"], "1"), (files["empty"], "2"), (files["two lines"], "3")]
    for read_back in (True, False):
        with pytest.raises(HarnessError, match=r"writing 3 files on m: its answer for .* is cut short"):
            batched.write_many(cut, pairs, "m", read_back)
    assert batched.write_many(cut, [], "m", True) == []


def test_irqbalance_is_found_by_its_name_alone(tmp_path: Path) -> None:
    """The PID lookup reads each process's comm with the shell's own `read` (a `cat` each cost a fork per
    process, some 10 ms under TCG): the one named irqbalance is found, a longer name is not."""
    started = []
    for name in ("irqbalance", "irqbalance2"):
        exe = tmp_path / name
        exe.write_bytes(Path("/bin/sleep").read_bytes())
        exe.chmod(0o755)
        started.append(subprocess.Popen([str(exe), "30"]))
    try:
        deadline = time.monotonic() + 10
        while [Path(f"/proc/{p.pid}/comm").read_text().strip() for p in started] != ["irqbalance", "irqbalance2"]:
            assert time.monotonic() < deadline  # until both have exec'd: comm is then the program's name
        res = proc.run(["sh", "-c", IRQBALANCE_PIDS], timeout=30, check=False)
        assert str(started[0].pid) in res.stdout.split() and str(started[1].pid) not in res.stdout.split()
        assert res.stderr == ""
    finally:
        for p in started:
            p.kill()
            p.wait()


def test_a_plans_files_are_set_in_one_command_and_put_back_in_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """A guest's tuning writes its files in one command through the agent, journaled first, and its
    revert puts them back in one (newest first)."""
    from vmharness.journal import journal
    from vmharness.system.root import HostRoot
    from vmharness.tune import apply
    from vmharness.tune.plan import Change, Plan

    root = HostRoot(tmp_path / "root", allow_writes=True)
    (tmp_path / "root").mkdir()
    knobs = {name: tmp_path / name for name in ("a", "b", "c")}
    for name, path in knobs.items():
        path.write_text(f"{name}-before\n")
    plan = Plan("guest:x", [Change("sysctl", str(p), f"{n}-before", f"{n}-after", "test") for n, p in knobs.items()])
    t = _target()
    monkeypatch.setattr(apply, "from_spec", lambda spec, root: t)  # the journal names an ssh target
    calls.clear()
    made = apply.apply(root, t, plan, lambda _l: None, "tune")
    assert len(calls) == 1 and [p.read_text() for p in knobs.values()] == ["a-after\n", "b-after\n", "c-after\n"]
    assert len(journal.outstanding(journal.read(root))) == 3
    calls.clear()
    said: list[str] = []
    assert apply.undo(root, made, said.append) == [] and len(calls) == 1
    assert [p.read_text() for p in knobs.values()] == ["a-before\n", "b-before\n", "c-before\n"]
    assert [line.split(":")[1].strip() for line in said] == [str(knobs[n]) + " -> " + f"{n}-before" for n in "cba"]
    assert journal.outstanding(journal.read(root)) == []


def test_folders_are_listed_in_one_command_each_as_ls_lists_it(tmp_path: Path) -> None:
    """A listing's names are data too: a marker, `$(...)`, a dangling link; an empty or missing folder lists
    nothing, first or last."""
    full = tmp_path / "full"
    full.mkdir()
    for name in ("rx-0", "$(touch pwned)", "@vmh-0123456789abcdef", ".hidden"):
        (full / name).write_text("")
    (full / "sub").mkdir()
    (full / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    folders = [str(tmp_path / "empty"), str(full), str(tmp_path / "missing"), str(tmp_path / "empty")]
    calls.clear()
    got = _target().listdir_many(folders)
    assert len(calls) == 1 and list(got) == folders[:3]
    assert got[str(full)] == sorted(["rx-0", "$(touch pwned)", "@vmh-0123456789abcdef", "sub", "dangling"])
    ls = {f: sorted(proc.run(["ls", "-1", f], timeout=10, check=False).stdout.splitlines()) for f in folders}
    assert got == ls and _target().listdir(str(full)) == ls[str(full)]  # as `ls -1` lists each
    assert not (Path.cwd() / "pwned").exists()

    def cut(argv: list[str]) -> proc.Result:
        res = proc.run(argv, timeout=10, check=False)
        return proc.Result(res.argv, 0, res.stdout[: len(res.stdout) // 2], "")

    with pytest.raises(HarnessError, match="listing 4 folders on m: its answer is cut short"):
        batched.list_many(cut, folders, "m")
    assert batched.list_many(cut, [], "m") == {}


def test_a_plan_reads_and_lists_a_machine_in_batches_only() -> None:
    """What a plan is made from (its sysctls, CPUs, nodes, a NIC's queues and vectors) comes in four
    commands; none lists one folder or reads one file alone (each a round trip through a guest's agent).
    Read from this machine, through a shell as a guest's are."""
    from vmharness.model import profile
    from vmharness.tune import knobs

    calls.clear()
    knobs.make(_target(), profile.load("seeds"), ("lo",), is_host=False)
    scripts = [c[2] for c in calls if c[:2] == ["sh", "-c"]]
    assert not [c for c in calls if c[0] == "ls"] and "exec head -c" not in " ".join(scripts), calls  # one alone
    assert sum(s.startswith(("m=$1; n=$2; shift 2; for p;", "m=$1; shift; for d;")) for s in scripts) == 4, calls
