"""A command's own /tmp and /run/vmharness: folders of the test's, bound over those two paths in a mount
namespace of the command's alone, so that what it writes there is seen as its own, and what another
harness on the machine writes there (a second `make test` beside this one) is neither seen nor
read by it. The hostile tables (tests/hostile_kit.py) judge their commands by these folders.

The parent makes the folders (`Own.make`); the forked child (tests/forked_cli.py) enters them
(`enter`) before it runs the command. Inside, /tmp is `ROOT/tmp` (mode 1777, as /tmp), holding the
way to each folder the command needs that lies under the real /tmp, with each folder's mode as there,
and that folder bound at its own path: the cases' working folders, and this checkout, whose modules
the command imports as it goes (a clean clone in /tmp/x: its `host-restore` could not import
`vmharness.experiment` without it); /run/vmharness is `ROOT/run` (mode 0700, as the harness makes
it), with a copy of this boot's KVM probe (host/inspect/kvm_memo.py) so that no command probes KVM anew.
Python 3.11 has no os.unshare or mount: libc's, through ctypes. util-linux's unshare(1), which
tests/slurm_cluster.py puts before the programs it starts, does not fit here: the child is forked from
an interpreter that imported the harness once, and never execs. Needs root (CAP_SYS_ADMIN), as the
tables do."""

from __future__ import annotations

import ctypes
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

TMP, STATE = Path("/tmp"), Path("/run/vmharness")
REPO = Path(__file__).resolve().parents[1]
KVM_PROBE = "kvm-probe.json"
CLONE_NEWNS, MS_BIND, MS_REC, MS_PRIVATE = 0x20000, 0x1000, 0x4000, 0x40000


@dataclass(frozen=True)
class Own:
    root: Path
    keep: tuple[Path, ...]  # folders under /tmp bound at their own paths inside, none inside another

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @classmethod
    def make(cls, root: Path, cases: Path) -> Own:
        """The folders for a command that works in `cases` (or a folder in it)."""
        under = sorted({p.resolve() for p in (cases, REPO) if p.resolve().is_relative_to(TMP)})
        own = cls(root, tuple(p for p in under if not any(p != q and p.is_relative_to(q) for q in under)))
        root.mkdir()
        own.tmp.mkdir()
        own.tmp.chmod(0o1777)
        for folder in own.keep:
            at, real = own.tmp, TMP
            for part in folder.relative_to(TMP).parts:
                at, real = at / part, real / part
                if not at.is_dir():
                    at.mkdir()
                    at.chmod(real.stat().st_mode & 0o7777)
        own.run.mkdir(mode=0o700)
        probe = STATE / KVM_PROBE
        if probe.is_file() and not probe.is_symlink():
            shutil.copy2(probe, own.run / KVM_PROBE)
        STATE.mkdir(mode=0o700, exist_ok=True)  # the mount point, as the harness would make it
        return own

    def request(self) -> dict[str, object]:
        return {"tmp": str(self.tmp), "run": str(self.run), "keep": [str(p) for p in self.keep]}


def enter(tmp: str, run: str, keep: list[str]) -> None:
    """In the calling process (a forked child, before the command): a mount namespace of its own, its
    mounts private to it, with `tmp` at /tmp (each of `keep` inside at its own path) and `run` at
    /run/vmharness."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)

    def ok(rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def bind(src: str, dst: str, flags: int = 0) -> None:
        ok(libc.mount(src.encode(), dst.encode(), None, MS_BIND | flags, None), f"bind {src} at {dst}")

    ok(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    ok(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    bind(run, str(STATE))  # first: `run` may lie under /tmp, where it is not once `tmp` is there
    for folder in keep:
        bind(folder, str(Path(tmp) / Path(folder).relative_to(TMP)))
    bind(tmp, str(TMP), MS_REC)
