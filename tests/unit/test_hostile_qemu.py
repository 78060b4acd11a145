"""`qemu`, the QEMU binary of a guest ([guest] or an [[instance]]), given values that must be refused,
through the real command (tests/hostile_kit.py): `run --print-xml` checks each named QEMU before it
prints anything. Each case: exit 2, one `error:` line naming the key (`config.instance[2].qemu`), one
`hint:` line, no traceback, nothing changed; the fakes that must get past the file checks to be run
live in a folder only root can write (tests/qemu_kit.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import hostile_kit, qemu_kit
from tests.hostile_kit import PWNED, Case, Outcomes, run_toml

RUN = ("run", "r.toml", "--print-xml")
THIRD = "config.instance[2].qemu"


def _third(qemu: str) -> str:
    """A configuration whose third instance names `qemu` (a TOML basic string's escapes apply)."""
    return ('[guest]\naccel = "tcg"\n[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n'
            f'[[instance]]\nname = "c"\nqemu = "{qemu}"\n')


def _made(make: str, text: str = "") -> hostile_kit.Build:
    """A fake made by qemu_kit (`script`, `fifo`, `link`) for the case, named by the third instance."""
    def build(cwd: Path) -> None:
        name = f"hostile-{cwd.name}"
        if make == "fifo":
            path = qemu_kit.fifo(name)
        elif make == "link":
            path = qemu_kit.link(name, text.replace("CWD", str(cwd)))
        else:
            path = qemu_kit.script(name, text)
        if make == "plain":
            path.chmod(0o644)
        if make == "hidden":
            path.parent.chmod(0o700)  # as /root is
        run_toml(_third(str(path)))(cwd)
    return build


def _study_off(text: str) -> hostile_kit.Build:
    """A study whose `qemu` switch turns to a fake (in a place only root can write)."""
    def build(cwd: Path) -> None:
        path = qemu_kit.script(f"hostile-{cwd.name}", text)
        run_toml(f'[[instance]]\nname = "on"\nqemu = "{qemu_kit.REAL}"\n'
                 f'[study]\nswitches = ["qemu"]\nqemu_off = "{path}"\n')(cwd)
    return build


def _in_cwd(build_more: hostile_kit.Build, rel: str) -> hostile_kit.Build:
    def build(cwd: Path) -> None:
        build_more(cwd)
        run_toml(_third(str(cwd / rel)))(cwd)
    return build


def _script_here(cwd: Path) -> None:
    (cwd / "q").write_text(f"#!/bin/sh\ntouch {PWNED}\n")
    (cwd / "q").chmod(0o755)


def _link_here(cwd: Path) -> None:
    os.symlink(qemu_kit.REAL, cwd / "q")


def cases() -> list[Case]:
    return [
        Case("qemu-newline", RUN, (THIRD, "control character"), run_toml(_third("/usr/bin/qemu\\n-L /tmp"))),
        Case("qemu-relative", RUN, (THIRD, "not an absolute path"), run_toml(_third("qemu-system-x86_64"))),
        Case("qemu-dot-dot", RUN, (THIRD, "not written plainly"),
             run_toml(_third("/usr/bin/../bin/qemu-system-x86_64"))),
        Case("qemu-option", RUN, (THIRD, "not an absolute path"), run_toml(_third("-L"))),
        Case("qemu-empty-part", RUN, (THIRD, "not written plainly"), run_toml(_third("/usr//bin/qemu"))),
        Case("qemu-missing", RUN, (THIRD, "cannot be found"), run_toml(_third("/nonexistent/qemu-system-x86_64"))),
        Case("qemu-a-folder", RUN, (THIRD, "a directory"), run_toml(_third("/usr/bin"))),
        Case("qemu-dev-zero", RUN, (THIRD, "a device node"), run_toml(_third("/dev/zero"))),
        Case("qemu-fifo", RUN, (THIRD, "a FIFO"), _made("fifo")),
        Case("qemu-in-tmp", RUN, (THIRD, "mode 1777"), _in_cwd(_script_here, "q")),
        Case("qemu-symlink-in-tmp", RUN, (THIRD, "the folder /tmp can be written by others", "mode 1777"),
             _in_cwd(_link_here, "q")),
        Case("qemu-symlink-out-to-tmp", RUN, (THIRD, "the folder /tmp can be written by others", "mode 1777"),
             hostile_kit.both(_script_here, _made("link", "CWD/q"))),
        Case("qemu-hangs", RUN, (THIRD, "did not answer -version within 5 s"), _made("script", qemu_kit.HANGS)),
        Case("qemu-garbage", RUN, (THIRD, "does not answer -version as QEMU does", "\\x1b[2J"),
             _made("script", qemu_kit.GARBAGE)),
        Case("qemu-fails", RUN, (THIRD, "-version failed (exit 1)"), _made("script", qemu_kit.FAILS)),
        Case("qemu-no-q35", RUN, (THIRD, "no machine type q35"), _made("script", qemu_kit.NO_Q35)),
        Case("qemu-no-cpu-model", RUN, (THIRD, "cannot expand the CPU model max"), _made("script", qemu_kit.NO_CPU)),
        Case("qemu-not-executable", RUN, (THIRD, "not executable"), _made("plain", qemu_kit.NO_Q35)),
        Case("qemu-libvirt-cannot-reach", RUN, (THIRD, "libvirt's QEMU user cannot reach it", "mode 700"),
             _made("hidden", qemu_kit.NO_Q35)),
        Case("guest-qemu-relative", RUN, ("config.guest.qemu", "not an absolute path"),
             run_toml('[guest]\nqemu = "./qemu"\n')),
        Case("guest-qemu-not-a-string", RUN, ("config.guest.qemu", "must be str"), run_toml('[guest]\nqemu = 7\n')),
        Case("qemu-remote-guests", RUN, ("config.guest.qemu", "qemu+ssh://far/system"),
             run_toml(f'[guest]\nuri = "qemu+ssh://far/system"\nqemu = "{qemu_kit.REAL}"\n')),
        Case("qemu-features-it-lacks", RUN, ("instance c", "no-such-bit", "knows no CPU feature"),
             run_toml(_third(qemu_kit.REAL) + 'cpu_features = ["+no-such-bit"]\n')),
        Case("study-qemu-off-relative", RUN, ("config.study.qemu_off", "not an absolute path"),
             run_toml('[study]\nswitches = ["qemu"]\nqemu_off = "qemu-system-x86_64"\n')),
        Case("study-qemu-switch-alone", RUN, ("study.switches: qemu needs study.qemu_off",),
             run_toml('[study]\nswitches = ["qemu"]\n')),
        Case("study-qemu-off-hangs", RUN, ("config.study.qemu_off", "did not answer -version within 5 s"),
             _study_off(qemu_kit.HANGS)),
        Case("qemu-in-bench", ("bench", "c.toml"), ("instance a: qemu is a guest's setting",),
             hostile_kit.bench_toml(f'[[instance]]\nname = "a"\nqemu = "{qemu_kit.REAL}"\n')),
    ]


CASES = cases()
outcomes = hostile_kit.fixture(CASES)


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_qemu_that_is_not_one_is_refused_in_one_line(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
