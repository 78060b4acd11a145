"""`kvm_modules`, an instance's own KVM modules, given values that must be refused, through the real
command (tests/hostile_kit.py): `run --print-xml` checks each instance's modules on this host (the
preflight's knobs.check_all) before it prints anything, and loads nothing. Each case: exit 2, one
`error:` line naming the key (`config.instance[2].kvm_modules`), one `hint:` line, no traceback,
nothing changed. Files that must get past the checks of the place are made in a folder only root can
write (tests/qemu_kit.py); a module for another kernel is a file whose modinfo (a fake one, first on
PATH) says another release: the real such refusal is in tests/integration/test_kvm_rig.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import hostile_kit, qemu_kit
from tests.hostile_kit import Case, Outcomes, run_toml

RUN = ("run", "r.toml", "--print-xml")
THIRD = "config.instance[2].kvm_modules"
FAKE_MODINFO = qemu_kit.FAKES / "modinfo-other-kernel"
OTHER_KERNEL = ('#!/bin/sh\ncase "$2" in\nname) echo kvm_amd ;;\n'
                "vermagic) echo '5.10.0-99-amd64 SMP mod_unload modversions ' ;;\nsrcversion) echo 0123ABCD ;;\nesac\n")


def _third(*paths: str) -> str:
    """A configuration whose third instance names `paths` (a TOML basic string's escapes apply)."""
    listed = ", ".join(f'"{p}"' for p in paths)
    return ('[guest]\naccel = "tcg"\n[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n'
            f'[[instance]]\nname = "c"\nkvm_modules = [{listed}]\n')


def _made(make: str, text: str = "") -> hostile_kit.Build:
    """A file `kvm-amd.ko` made for the case in a folder only root can write, named by the third instance."""
    def build(cwd: Path) -> None:
        path = qemu_kit.trusted(f"hostile-{cwd.name}") / "kvm-amd.ko"
        if make == "fifo":
            os.mkfifo(path, 0o644)
        elif make == "folder":
            path.mkdir()
        elif make == "link":
            path.symlink_to(text)
        else:
            path.write_text(text)
            path.chmod(0o644)
        run_toml(_third(str(path)))(cwd)
    return build


def _fake_modinfo(cwd: Path) -> None:
    FAKE_MODINFO.mkdir(parents=True, exist_ok=True)
    (FAKE_MODINFO / "modinfo").write_text(OTHER_KERNEL)
    (FAKE_MODINFO / "modinfo").chmod(0o755)


def _in_cwd(cwd: Path) -> None:
    (cwd / "kvm.ko").write_text("not a module\n")
    run_toml(_third(str(cwd / "kvm.ko")))(cwd)


def cases() -> list[Case]:
    return [
        Case("kvm-modules-newline", RUN, (THIRD, "control character"), run_toml(_third("/root/kvm/kvm\\n.ko"))),
        Case("kvm-modules-space", RUN, (THIRD, "a character other than"), run_toml(_third("/root/kvm/a b.ko"))),
        Case("kvm-modules-relative", RUN, (THIRD, "not an absolute path"), run_toml(_third("kvm/kvm.ko"))),
        Case("kvm-modules-option", RUN, (THIRD, "not an absolute path"), run_toml(_third("-f.ko"))),
        Case("kvm-modules-dot-dot", RUN, (THIRD, "not written plainly"), run_toml(_third("/root/../tmp/kvm.ko"))),
        Case("kvm-modules-not-ko", RUN, (THIRD, "does not end in .ko"), run_toml(_third("/dev/zero"))),
        Case("kvm-modules-twice", RUN, (THIRD, "twice"), run_toml(_third("/root/kvm.ko", "/root/kvm.ko"))),
        Case("kvm-modules-three", RUN, (THIRD, "names 3 files; at most 2"),
             run_toml(_third("/root/a.ko", "/root/b.ko", "/root/c.ko"))),
        Case("kvm-modules-not-a-list", RUN, ("config.instance[2].kvm_modules", "must be"),
             run_toml('[[instance]]\nname = "a"\n[[instance]]\nname = "b"\n[[instance]]\nname = "c"\n'
                      'kvm_modules = "/root/kvm.ko"\n')),
        Case("kvm-modules-missing", RUN, (THIRD, "cannot be found"), run_toml(_third("/nonexistent/kvm.ko"))),
        Case("kvm-modules-a-folder", RUN, (THIRD, "a directory"), _made("folder")),
        Case("kvm-modules-fifo", RUN, (THIRD, "a FIFO"), _made("fifo")),
        Case("kvm-modules-dev-zero", RUN, (THIRD, "a device node"), _made("link", "/dev/zero")),
        Case("kvm-modules-in-tmp", RUN, (THIRD, "mode 1777", "could be swapped"), _in_cwd),
        Case("kvm-modules-not-a-module", RUN, (THIRD, "is not a kernel module modinfo reads"),
             _made("plain", "\x7fELF but not really\n")),
        Case("kvm-modules-other-kernel", RUN, (THIRD, "built for another kernel", "5.10.0-99-amd64 SMP",
                                               f"running kernel is {os.uname().release!r}"),
             hostile_kit.both(_fake_modinfo, _made("plain", "a module for another kernel\n")),
             env={"PATH": f"{FAKE_MODINFO}:{os.environ.get('PATH', '/usr/bin:/bin')}"}),
        Case("kvm-modules-in-bench", ("bench", "c.toml"), ("instance a: kvm_modules is a guest's setting",),
             hostile_kit.bench_toml('[[instance]]\nname = "a"\nkvm_modules = ["/root/kvm.ko"]\n')),
    ]


CASES = cases()
outcomes = hostile_kit.fixture(CASES)


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_kvm_module_file_that_is_not_fit_is_refused_in_one_line(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
