"""`[[host_boot]]` and an instance's `host_boot`, given values that must be refused, through the real
command (tests/hostile_kit.py): `run --print-xml` checks each host boot's kernel and initrd on this
machine before it prints anything, and boots nothing; `run` itself refuses a configuration with an
instance under another host boot without --allow-host-reboot, saying what a reboot would end. Each
case: exit 2, one `error:` line naming the key, one `hint:` line, no traceback, nothing changed. Files
that must get past the checks of the place are made in a folder only root can write (tests/qemu_kit.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import hostboot_kit, hostile_kit, qemu_kit
from tests.hostile_kit import Case, Outcomes, run_toml

RUN = ("run", "r.toml", "--print-xml")
KERNEL = "config.host_boot[1].kernel"


def _toml(kernel: str = "/boot/vmlinuz-6.1", initrd: str = "", cmdline: str = "spectre_v2=off",
          more: str = "", instance: str = "v2off") -> str:
    """Two host boots, the second with the values given (a TOML basic string's escapes apply), and an
    instance under `instance`."""
    extra = f'initrd = "{initrd}"\n' if initrd else ""
    return ('[guest]\naccel = "tcg"\n[[host_boot]]\nname = "first"\nkernel = "/boot/vmlinuz-6.1"\n'
            f'[[host_boot]]\nname = "v2off"\nkernel = "{kernel}"\n{extra}cmdline = "{cmdline}"\n{more}'
            f'[[instance]]\nname = "a"\n[[instance]]\nname = "b"\nhost_boot = "{instance}"\n')


def _made(make: str, content: bytes = b"", initrd: bool = False) -> hostile_kit.Build:
    """A kernel (or, with `initrd`, an initrd beside a good kernel) made for the case in a folder only
    root can write, named by the second host boot."""
    def build(cwd: Path) -> None:
        folder = qemu_kit.trusted(f"hostile-boot-{cwd.name}")
        path = folder / ("initrd.img" if initrd else "vmlinuz")
        if make == "fifo":
            os.mkfifo(path, 0o644)
        elif make == "folder":
            path.mkdir()
        elif make == "link":
            (folder / "real").write_bytes(hostboot_kit.bzimage("6.1.0-18-amd64"))
            path.symlink_to(folder / "real")
        else:
            path.write_bytes(content)
            path.chmod(0o666 if make == "writable" else 0o644)
        good = folder / "vmlinuz-good"
        good.write_bytes(hostboot_kit.bzimage("6.1.0-18-amd64"))
        good.chmod(0o644)
        run_toml(_toml(str(good), str(path)) if initrd else _toml(str(path)))(cwd)
    return build


def _in_cwd(cwd: Path) -> None:
    (cwd / "vmlinuz").write_bytes(hostboot_kit.bzimage("6.1.0-18-amd64"))
    run_toml(_toml(str(cwd / "vmlinuz")))(cwd)


def _good(cwd: Path) -> None:
    _made("plain", hostboot_kit.bzimage("6.1.0-18-amd64"))(cwd)


def cases() -> list[Case]:
    cmd = "config.host_boot[1].cmdline"
    return [
        Case("host-boot-kernel-newline", RUN, (KERNEL, "control character"), run_toml(_toml("/boot/vml\\ninuz"))),
        Case("host-boot-kernel-relative", RUN, (KERNEL, "not an absolute path"), run_toml(_toml("vmlinuz"))),
        Case("host-boot-kernel-dot-dot", RUN, (KERNEL, "not written plainly"), run_toml(_toml("/boot/../tmp/k"))),
        Case("host-boot-kernel-space", RUN, (KERNEL, "a character other than"), run_toml(_toml("/boot/a b"))),
        Case("host-boot-kernel-missing", RUN, (KERNEL, "cannot be found"), run_toml(_toml("/nonexistent/vmlinuz"))),
        # no kernel is the running one: its initrd goes with it, never another
        Case("host-boot-initrd-without-kernel", RUN, ("config.host_boot[0].initrd is set, and it has no kernel",),
             run_toml('[[host_boot]]\nname = "x"\ninitrd = "/boot/initrd.img"\n[[instance]]\nname = "a"\n'
                      'host_boot = "x"\n')),
        Case("host-boot-kernel-symlink", RUN, (KERNEL, "is a symlink"), _made("link")),
        Case("host-boot-kernel-dev-zero", RUN, (KERNEL, "a device node"), run_toml(_toml("/dev/zero"))),
        Case("host-boot-kernel-folder", RUN, (KERNEL, "a directory"), _made("folder")),
        Case("host-boot-kernel-fifo", RUN, (KERNEL, "a FIFO"), _made("fifo")),
        Case("host-boot-kernel-in-tmp", RUN, (KERNEL, "could be swapped"), _in_cwd),
        Case("host-boot-kernel-writable", RUN, (KERNEL, "can be written by others"), _made("writable", b"x")),
        Case("host-boot-kernel-not-bzimage", RUN, (KERNEL, "is not a bzImage"), _made("plain", b"\x7fELF...")),
        Case("host-boot-initrd-symlink", RUN, ("config.host_boot[1].initrd", "is a symlink"),
             _made("link", initrd=True)),
        Case("host-boot-initrd-fifo", RUN, ("config.host_boot[1].initrd", "a FIFO"), _made("fifo", initrd=True)),
        Case("host-boot-cmdline-newline", RUN, (cmd, "control character"), run_toml(_toml(cmdline="a\\nb"))),
        Case("host-boot-cmdline-init", RUN, (cmd, "sets init="), run_toml(_toml(cmdline="quiet init=/bin/sh"))),
        Case("host-boot-cmdline-rdinit", RUN, (cmd, "sets rdinit="), run_toml(_toml(cmdline="rdinit=/x"))),
        Case("host-boot-cmdline-quoted-init", RUN, (cmd, "sets init="),
             run_toml(_toml(cmdline='\\"init=/bin/sh\\"'))),
        Case("host-boot-cmdline-init-args", RUN, (cmd, "arguments to init"),
             run_toml(_toml(cmdline="quiet -- single"))),
        Case("host-boot-cmdline-systemd-run", RUN, (cmd, "'systemd.run=/bin/sh'", "host's init or initramfs"),
             run_toml(_toml(cmdline="quiet systemd.run=/bin/sh"))),
        Case("host-boot-cmdline-systemd-setenv", RUN, (cmd, "systemd.setenv=LD_PRELOAD"),
             run_toml(_toml(cmdline="systemd.setenv=LD_PRELOAD=/tmp/x.so"))),
        Case("host-boot-cmdline-init-environment", RUN, (cmd, "'LD_PRELOAD=/tmp/x.so'", "its environment"),
             run_toml(_toml(cmdline="spectre_v2=off LD_PRELOAD=/tmp/x.so"))),
        Case("host-boot-cmdline-single", RUN, (cmd, "'single'", "(an argument)"),
             run_toml(_toml(cmdline="spectre_v2=off single"))),
        Case("host-boot-cmdline-initramfs-shell", RUN, (cmd, "'rd.break'", "host's init or initramfs"),
             run_toml(_toml(cmdline="rd.break"))),
        Case("host-boot-cmdline-too-long", RUN, (cmd, "the kernel keeps 2047"), run_toml(_toml(cmdline="a" * 2048))),
        Case("host-boot-mode", RUN, ("config.host_boot[1].cmdline_mode", "add or replace"),
             run_toml(_toml(more='cmdline_mode = "prepend"\n'))),
        Case("host-boot-named-twice", RUN, ("config.host_boot[1].name 'first' is named twice",),
             run_toml(_toml().replace('name = "v2off"', 'name = "first"'))),
        Case("host-boot-bad-name", RUN, ("config.host_boot[1].name", "is not a name"),
             run_toml(_toml().replace('name = "v2off"', 'name = "../x"'))),
        Case("host-boot-unknown", RUN, ("instance b: host_boot 'nope' names no [[host_boot]]",),
             run_toml(_toml(instance="nope"))),
        Case("host-boot-instance-not-a-name", RUN, ("config.instance[1].host_boot", "is not a name"),
             run_toml(_toml(instance="-x"))),
        Case("host-boot-in-bench", ("bench", "c.toml"), ("instance a: host_boot is a guest's setting",),
             hostile_kit.bench_toml('[[instance]]\nname = "a"\nhost_boot = "x"\n')),
        Case("host-boot-no-consent", ("run", "r.toml"), ("this run reboots the host", "times (kexec), which ends"),
             _good),
        Case("host-boot-keep-host", ("run", "r.toml", "--keep-host", "--allow-host-reboot"),
             ("--keep-host: a run with host boots reboots the host",), _good),
    ]


CASES = cases()
outcomes = hostile_kit.fixture(CASES)


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_host_boot_that_is_not_fit_is_refused_in_one_line(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
