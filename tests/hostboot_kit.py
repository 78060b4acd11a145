"""A fake host for the host-boot tests: a tree laid out like / (the files arrival.py reads) that a fake
kexec "boots" by rewriting them, and kernels that are bzImages only as far as the header goes. Nothing
here runs kexec: the machine the tests run on is never rebooted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests import qemu_kit
from vmharness.experiment.hostboots.plan import START
from vmharness.experiment.hostboots.target import Target
from vmharness.host.inspect import boot_file
from vmharness.journal import journal
from vmharness.system.root import HostRoot

HOME_RELEASE = "6.1.0-18-amd64"
HOME_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=/dev/vda ro quiet"


def bzimage(release: str) -> bytes:
    """The first bytes of a bzImage whose header names `release` (Documentation/arch/x86/boot.rst)."""
    head = bytearray(0x1000)
    head[0x202:0x206] = b"HdrS"
    version = f"{release} (builder@example) #1 SMP PREEMPT_DYNAMIC".encode()
    head[0x20E:0x210] = (0x400 - 0x200).to_bytes(2, "little")
    head[0x400:0x400 + len(version)] = version
    return bytes(head)


def kernel(folder: Path, release: str) -> boot_file.BootFile:
    path = folder / f"vmlinuz-{release}"
    path.write_bytes(bzimage(release))
    path.chmod(0o644)
    return boot_file.check(str(path), "kernel", kernel=True)


class BootingHost:
    """The tree at `base` as a host: its release, command line, boot id, vulnerabilities, microcode."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.boots = 0
        self.root = HostRoot(base, allow_writes=True)
        (base / "sys/devices/system/cpu/vulnerabilities").mkdir(parents=True)
        (base / "proc/sys/kernel/random").mkdir(parents=True)
        (base / "proc/cpuinfo").write_text("processor\t: 0\nmicrocode\t: 0xa0011d1\n")
        self.boot(HOME_RELEASE, HOME_CMDLINE)

    def boot(self, release: str, cmdline: str) -> None:
        self.boots += 1
        (self.base / "proc/sys/kernel/osrelease").write_text(release + "\n")
        (self.base / "proc/cmdline").write_text(cmdline + "\n")
        (self.base / "proc/sys/kernel/random/boot_id").write_text(f"boot-{self.boots}\n")
        verdict = "Vulnerable" if "spectre_v2=off" in cmdline else "Mitigation: Retpolines"
        (self.base / "sys/devices/system/cpu/vulnerabilities/spectre_v2").write_text(verdict + "\n")
        for p in (self.base / "run").glob("vmharness/*"):  # a new boot starts with an empty /run
            p.unlink()

    @property
    def release(self) -> str:
        return (self.base / "proc/sys/kernel/osrelease").read_text().strip()

    @property
    def cmdline(self) -> str:
        return (self.base / "proc/cmdline").read_text().strip()


class FakeKexec:
    """kexec as the engine sees it: `load` keeps the argv (after checking the load was journaled),
    `execute` returns (the real one does not); `arrive` boots the fake host into what was loaded, or
    into `wrong` (a release and command line) instead."""

    def __init__(self, host: BootingHost, releases: dict[str, str]) -> None:
        self.host, self.releases = host, releases  # kernel path -> its release
        self.loaded: list[str] | None = None
        self.calls: list[str] = []
        self.tick: Callable[[str], None] = lambda _what: None  # a test's hook after a load, before an execute

    def load(self, argv: list[str]) -> None:
        records = journal.read(self.host.root)
        assert records and records[-1]["op"] == "kexec" and records[-1]["kernel"] == argv[2], "load not journaled"
        self.calls.append("load")
        self.loaded = argv
        self.tick("load")

    def unload(self) -> None:
        self.loaded = None

    def execute(self) -> None:
        assert self.loaded is not None, "kexec -e without a loaded kernel"
        self.tick("execute")
        self.calls.append("execute")

    def arrive(self, wrong: tuple[str, str] | None = None) -> None:
        assert self.loaded is not None
        append = next(a for a in self.loaded if a.startswith("--append=")).removeprefix("--append=")
        self.host.boot(*(wrong or (self.releases[self.loaded[2]], append)))
        self.loaded = None


def targets(folder: Path) -> tuple[Callable[[], dict[str, Target]], dict[str, str]]:
    """The targets of the tests' configuration (START and `v2off`, another kernel with spectre_v2=off
    added) and each kernel's release by path."""
    home = kernel(folder, HOME_RELEASE)
    other = kernel(folder, "7.3.4+deb13-amd64")
    made = {START: Target(START, home, None, HOME_CMDLINE),
            "v2off": Target("v2off", other, None, "root=/dev/vda ro quiet spectre_v2=off")}
    return (lambda: made), {home.path: home.release, other.path: other.release}


def trusted(name: str) -> Path:
    return qemu_kit.trusted(name)


def state(base: Path) -> dict[str, object]:
    return dict(json.loads((base / "var/lib/vmharness/hostboots/state.json").read_text()))
