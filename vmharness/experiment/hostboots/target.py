"""What each host boot would load: its kernel and initrd (checked on this machine: host/inspect/
boot_file.py), the command line the new kernel gets, and the kexec command that loads it. Also the
way home: the boot the run started in, as a target of its own, since a run that switched goes back to
it at the end (the kernel the running release names in /boot, the command line it booted with).

The command line: `cmdline_mode = "replace"` gives the host boot's `cmdline` alone; `"add"` gives the
running command line (less the boot loader's BOOT_IMAGE= and initrd=, which name the files of the boot
the run started in) then `cmdline`, then the running line's arguments for init (after `--`), if any.
A parameter given twice is read by the kernel as its last, so an added `spectre_v2=off` wins over one
the host boots with. Either way the root file system (`root=`, `nfsroot=`) is the one the host runs
with: another would start another system's init, a program the configuration chose."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from vmharness.errors import HarnessError
from vmharness.experiment.hostboots.plan import START
from vmharness.host.inspect import boot_file
from vmharness.model import kernel_cmdline, vectors
from vmharness.model.hostboots import CMDLINE_SIZE, HostBootSection
from vmharness.model.sections import RunConfig
from vmharness.system.root import HostRoot

_LOADER = ("BOOT_IMAGE", "initrd")  # what a boot loader adds, naming the files it booted
_ROOT = ("root", "nfsroot")  # the file system whose init the new kernel starts: the host's own, always


@dataclass(frozen=True)
class Target:
    """A host boot as kexec would load it, and what the host must report once it runs."""

    boot: str  # the host boot's name (START: the run's own)
    kernel: boot_file.BootFile
    initrd: boot_file.BootFile | None
    cmdline: str  # what the new kernel's /proc/cmdline must read

    @property
    def release(self) -> str:
        return self.kernel.release

    def kexec_argv(self, program: str) -> list[str]:
        """`kexec -l`'s argv: an argument each, never through a shell."""
        initrd = [f"--initrd={self.initrd.path}"] if self.initrd else []
        return [program, "-l", self.kernel.path, *initrd, f"--append={self.cmdline}"]

    def to_json(self) -> dict[str, Any]:
        return {"boot": self.boot, "kernel": self.kernel.to_json(), "cmdline": self.cmdline,
                "initrd": self.initrd.to_json() if self.initrd else None}


def recheck(saved: dict[str, Any]) -> Target:
    """A target as the run's state saved it at the start (state.py), its files checked again: the same
    file (sha256) or it is refused, since the label the run measures under names what it saw then."""
    try:
        boot, cmdline = str(saved["boot"]), str(saved["cmdline"])
        paths = [str(saved["kernel"]["path"]), str(saved["initrd"]["path"]) if saved["initrd"] else ""]
        digests = [saved["kernel"]["sha256"], saved["initrd"]["sha256"] if saved["initrd"] else ""]
    except (KeyError, TypeError):
        raise HarnessError(f"the run's state holds a damaged host boot ({str(saved)[:80]})",
                           "host-restore, then start the run again") from None
    where = f"host boot {boot or 'the run started in'}"
    kernel = boot_file.check(paths[0], f"{where}: kernel", kernel=True)
    initrd = boot_file.check(paths[1], f"{where}: initrd", kernel=False) if paths[1] else None
    for was, now in zip(digests, [kernel, initrd], strict=True):
        if now is not None and now.sha256 != was:
            raise HarnessError(f"{where}: {now.path} changed since the run began (sha256 {str(was)[:16]}... -> "
                               f"{now.sha256[:16]}...)", "put the file back, or start a new run")
    return Target(boot, kernel, initrd, cmdline)


def running_cmdline(root: HostRoot) -> str:
    return root.read_text("proc/cmdline").strip()


def running_release(root: HostRoot) -> str:
    return root.read_text("proc/sys/kernel/osrelease").strip()


def compose(boot: HostBootSection, running: str, where: str) -> str:
    """The command line `boot` gives the new kernel (see the top), at most the kernel's size."""
    if boot.cmdline_mode == "replace":
        line = boot.cmdline
    else:
        parsed = kernel_cmdline.parse(running)
        kept = [p.text for p in parsed.params if p.key not in _LOADER]
        line = " ".join(w for w in [*kept, boot.cmdline, parsed.rest] if w)  # init's arguments stay last
    if len(line) >= CMDLINE_SIZE:
        raise HarnessError(f"{where}: the command line it would boot with is {len(line)} characters: the kernel "
                           f"keeps {CMDLINE_SIZE - 1}", "shorten cmdline, or use cmdline_mode = \"replace\"")
    for key in _ROOT:
        new, now = _last(line, key), _last(running, key)
        if new != now:
            raise HarnessError(f"{where}: it would boot with {_said(key, new)}, and the host runs with "
                               f"{_said(key, now)}: another root file system would start its own init",
                               f"keep the host's {key}= (\"add\" keeps it; with \"replace\" write it as "
                               "/proc/cmdline has it)")
    return line


def _last(line: str, key: str) -> str | None:
    """The value the kernel reads for `key`, the last one given; None where it has none."""
    values = [p.value for p in kernel_cmdline.parse(line).params if p.key == key]
    return values[-1] if values else None


def _said(key: str, value: str | None) -> str:
    return f"no {key}=" if value is None else f"{key}={value[:80]!r}"


def of(root: HostRoot, boot: HostBootSection, n: int) -> Target:
    """Host boot `boot` (the n-th [[host_boot]]) checked on this machine; without a kernel, the running
    one's files (as `home` finds them). A `cmdline` that turns an attack vector off is refused for a
    kernel without the attack-vector controls (model/vectors.py), by the release in its header; what
    the running command line carries over ("add") is the host's own, and is not judged here."""
    where = f"config.host_boot[{n}]"
    if boot.kernel:
        kernel = boot_file.check(boot.kernel, f"{where}.kernel", kernel=True)
        initrd = boot_file.check(boot.initrd, f"{where}.initrd", kernel=False) if boot.initrd else None
    else:
        running = home(root)
        kernel, initrd = running.kernel, running.initrd
    if why := vectors.refused(boot.cmdline, kernel.release):
        raise HarnessError(f"{where} ({boot.name}): {why}", vectors.HINT)
    return Target(boot.name, kernel, initrd, compose(boot, running_cmdline(root), where))


def home(root: HostRoot) -> Target:
    """The boot the run started in, as a target: /boot/vmlinuz-RELEASE (and /boot/initrd.img-RELEASE when
    there is one), with the command line it runs with now."""
    release = running_release(root)
    where = "the boot the run started in (to go back to at the end)"
    try:
        kernel = boot_file.check(f"/boot/vmlinuz-{release}", f"{where}: its kernel", kernel=True)
    except HarnessError as exc:
        raise HarnessError(exc.message, f"a run with host boots kexecs back to the running kernel at the end: "
                           f"keep its bzImage at /boot/vmlinuz-{release}") from None
    initrd_path = f"/boot/initrd.img-{release}"
    initrd = None
    if os.path.lexists(initrd_path):
        initrd = boot_file.check(initrd_path, f"{where}: its initrd", kernel=False)
    if kernel.release != release:
        raise HarnessError(f"{where}: /boot/vmlinuz-{release} is the kernel {kernel.release!r}, not the running "
                           f"{release!r}", "reinstall the running kernel's package, or boot the one in /boot")
    return Target(START, kernel, initrd, running_cmdline(root))


def named(root: HostRoot, cfg: RunConfig) -> dict[str, Target]:
    """Each [[host_boot]] an instance names, checked on this machine, in the order of the tables."""
    used = {i.host_boot for i in cfg.instance}
    return {b.name: of(root, b, n) for n, b in enumerate(cfg.host_boot) if b.name in used}


def all_of(root: HostRoot, cfg: RunConfig) -> dict[str, Target]:
    """Each host boot an instance names as a target, and START's: the way home."""
    return {**named(root, cfg), START: home(root)}
