"""`[[host_boot]]`: a host kernel and command line a run's instances may run under, reached with kexec
(the host's kernel or its command line as a variable of the experiment: a hypervisor mitigation lives
there, `spectre_v2=`, `retbleed=`, `vmscape=`, `mitigations=`, or in a patched KVM built into a kernel).
An instance names one with `host_boot = "NAME"`; "" (the default) is the boot the run started in,
which needs no entry. A host boot without a kernel boots the running one again
(/boot/vmlinuz-RELEASE, as the way home finds it: experiment/hostboots/target.py) with another command line.

    [[host_boot]]
    name = "v2-off"
    kernel = "/boot/vmlinuz-6.1.0-18-amd64"
    initrd = "/boot/initrd.img-6.1.0-18-amd64"   # optional
    cmdline = "spectre_v2=off"
    cmdline_mode = "add"   # add: the running command line, then this; replace: this alone

Here only the form is checked: the files' paths absolute and written plainly (kexec reads them by that
path, and they are printed in the record), the command line one that cannot run another program as
the host's first process (`init=`, `rdinit=`, arguments for init after `--` or before it, `systemd.*`,
an initramfs's shell, an upper-case name for init's environment) and that fits the
kernel's COMMAND_LINE_SIZE. What each file is (a regular file, not a symlink, in folders only root can
change, a bzImage) is checked on the host before anything is taken: host/inspect/boot_file.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vmharness.errors import HarnessError
from vmharness.model import kernel_cmdline, plainpath
from vmharness.model.checks import check_name
from vmharness.model.schema import checked

CmdlineMode = Literal["add", "replace"]
CMDLINE_SIZE = 2048  # x86's COMMAND_LINE_SIZE, the trailing NUL included: a longer line is cut by the kernel
HINT_PATH = "write the file's whole path, e.g. /boot/vmlinuz-6.1.0-18-amd64"
HINT_CMDLINE = "a host boot changes the kernel's parameters; the host's first process stays the one it has"
_NOT_OURS = ("init", "rdinit")  # the program the kernel starts as PID 1
# What tells the host's init or its initramfs to run something else, or to stop short of the services
# the run resumes through: systemd's own parameters (systemd.run= runs a command, systemd.setenv= sets
# LD_PRELOAD for every unit, systemd.unit=, .wants=, .mask=, .debug_shell), those of systemd in the
# initramfs, and the shells of dracut and initramfs-tools.
_INIT_PREFIXES = ("systemd.", "rd.systemd.")
_INIT_NAMES = ("rd.break", "rd.shell", "rd.emergency", "break")
# And what makes the kernel itself run or load a program from a path: `sysctl.*` (since Linux 5.8:
# kernel.modprobe, kernel.core_pattern's pipe, kernel.hotplug name programs it runs as root) and
# firmware_class.path (firmware from any folder, into a device that can DMA).
_KERNEL_RUNS = ("sysctl.", "firmware_class.path")
# A parameter the kernel does not know and whose name has no '.' goes to init (Documentation/
# admin-guide/kernel-parameters.rst): a bare word as an argument (these start single-user, a rescue or
# an emergency shell, or skip the boot scripts), one with '=' into its environment, where an upper-case
# name is the environment's (LD_PRELOAD=...): the kernel's own parameters are lower-case.
_INIT_WORDS = frozenset(w.replace("-", "_") for w in  # as Param.key spells them: '-' read as '_'
                        ("single", "s", "S", "1", "2", "3", "4", "5", "emergency", "rescue", "-s", "-b", "-a", "auto",
                         "-z"))


def check_file_path(value: str, where: str) -> str:
    """An absolute path, written plainly (plainpath.py)."""
    return plainpath.check(value, where, HINT_PATH, "the kernel")


def check_optional_path(value: str, where: str) -> str:
    """"" (none), or a path as check_file_path allows."""
    return value if value == "" else check_file_path(value, where)


def check_cmdline(value: str, where: str) -> str:
    """A host command line (or the part added to one): no parameter that names the first process, no
    arguments for init, at most CMDLINE_SIZE - 1 characters. Control characters were refused by the
    schema (every string is)."""
    if len(value) >= CMDLINE_SIZE:
        raise HarnessError(f"{where} is {len(value)} characters long: the kernel keeps {CMDLINE_SIZE - 1}",
                           "shorten it")
    line = kernel_cmdline.parse(value)
    for p in line.params:
        if p.key in _NOT_OURS:
            raise HarnessError(f"{where} sets {p.key}= ({p.text[:60]!r}): another program as the host's first "
                               "process is refused", HINT_CMDLINE)
        if p.key.startswith(_INIT_PREFIXES) or p.key in _INIT_NAMES:
            raise HarnessError(f"{where} holds {p.text[:60]!r}, a word for the host's init or initramfs: what "
                               "the host starts is refused", HINT_CMDLINE)
        if p.key.startswith(_KERNEL_RUNS):
            raise HarnessError(f"{where} holds {p.text[:60]!r}, which names a program or firmware the kernel would "
                               "run or load: refused",
                               "set a sysctl in a tuning profile's [sysctl] table (docs/tuning.md), which journals it "
                               "and gives it back")
        passed = _passed_to_init(p)
        if passed:
            raise HarnessError(f"{where} holds {p.text[:60]!r}, which the kernel passes to init ({passed}): refused",
                               HINT_CMDLINE)
    if line.rest:  # from a bare `--` on
        raise HarnessError(f"{where} passes arguments to init after '--' ({line.rest[:60]!r})", HINT_CMDLINE)
    return value


def _passed_to_init(p: kernel_cmdline.Param) -> str:
    """How the kernel would pass `p` to init ("" where it keeps it): a word of `_INIT_WORDS` as an
    argument, an upper-case name with '=' into its environment."""
    if "." in p.key:
        return ""
    if p.value is None:
        return "an argument" if p.key in _INIT_WORDS else ""
    return "its environment" if p.key != p.key.lower() else ""


def check_boot_name(value: str, where: str) -> str:
    """An instance's host_boot: "" (the boot the run started in) or a host boot's name."""
    return value if value == "" else check_name(value, where)


@dataclass(frozen=True)
class HostBootSection:
    name: str = checked(check_name)
    kernel: str = checked(check_optional_path, default="")  # the bzImage kexec loads; "": the running kernel
    initrd: str = checked(check_optional_path, default="")  # its initramfs; "": none
    cmdline: str = checked(check_cmdline, default="")
    cmdline_mode: CmdlineMode = "add"  # add: after the running command line; replace: this line alone


def check_host_boots(boots: tuple[HostBootSection, ...], instances: tuple[tuple[str, str], ...]) -> None:
    """Names unique, and each instance's (name, host_boot) names a host boot that exists."""
    seen: set[str] = set()
    for n, b in enumerate(boots):
        if b.initrd and not b.kernel:
            raise HarnessError(f"config.host_boot[{n}].initrd is set, and it has no kernel (the running one's "
                               "initrd goes with it)", "name the kernel the initrd was made for, or drop initrd")
        if b.name in seen:
            raise HarnessError(f"config.host_boot[{n}].name {b.name!r} is named twice",
                               "give each [[host_boot]] its own name")
        seen.add(b.name)
    for inst, boot in instances:
        if boot and boot not in seen:
            known = ", ".join(sorted(seen)) or "none: add a [[host_boot]] table"
            raise HarnessError(f"instance {inst}: host_boot {boot!r} names no [[host_boot]]",
                               f"host boots known: {known}; \"\" (the default) is the boot the run starts in")
