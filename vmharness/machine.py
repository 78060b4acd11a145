"""A machine the harness runs commands on: this one, or one reached with OpenSSH by a name from
~/.ssh/config. Everything that touches another machine goes through here."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from vmharness import proc

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
SSH_CONFIG_ENV = "VMHARNESS_SSH_CONFIG"  # an ssh config file to use instead of ~/.ssh/config


@dataclass(frozen=True)
class Machine:
    ssh: str | None = None  # an ssh destination ([user@]host or a Host from ~/.ssh/config); None: here

    @property
    def local(self) -> bool:
        return self.ssh is None

    @property
    def label(self) -> str:
        return self.ssh or "this machine"

    def argv(self, argv: Sequence[str | Path]) -> list[str]:
        """The command line that runs argv on this machine; $VMHARNESS_SSH_CONFIG is ssh's -F."""
        args = [str(a) for a in argv]
        if self.ssh is None:
            return args
        config = os.environ.get(SSH_CONFIG_ENV)
        extra = ["-F", config] if config else []
        return ["ssh", *extra, *SSH_OPTIONS, self.ssh, "--", shlex.join(args)]

    def run(self, argv: Sequence[str | Path], *, timeout: float, check: bool = True,
            input: str | None = None) -> proc.Result:
        return proc.run(self.argv(argv), timeout=timeout, check=check, input=input)


def for_uri(uri: str) -> Machine:
    """The machine a libvirt URI drives: `qemu+ssh://user@host/system` is `user@host`; a URI without
    a host (`qemu:///system`) is this one."""
    parts = urlsplit(uri)
    if not parts.hostname:
        return Machine()
    user = f"{parts.username}@" if parts.username else ""
    return Machine(f"{user}{parts.hostname}")
