"""The kernel log's lines about CPU vulnerabilities and their mitigations, as a machine printed them at
boot ("Spectre V2 : Mitigation: Retpolines", "Kernel/User page tables isolation: enabled"): beside the
vulnerability files, what tells two boots' mitigations apart. One filter for the guest's log (read through
its agent: guest/provenance.py) and the host's (`dmesg`, on the live host alone)."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError
from vmharness.system import proc
from vmharness.system.root import HostRoot

WORDS = "mitigat|vulnerab|isolation|spectre|meltdown|retbleed|speculat"  # grep -iE's pattern, as the guest's
_WORDS = re.compile(WORDS, re.IGNORECASE)
_STAMP = re.compile(r"^\[[ 0-9.]+\] ")
MAX_LINES = 200  # a log that says more about mitigations than this is cut: the boot's lines come first
TIMEOUT = 30.0


def mitigation_lines(lines: list[str]) -> list[str]:
    """The lines that match WORDS, without their timestamps and without the echoed command line (it
    matches when it holds `mitigations=`, and the command line is reported on its own)."""
    out = [_STAMP.sub("", line.rstrip()) for line in lines if _WORDS.search(line)]
    return [line for line in out if "command line:" not in line.lower()][:MAX_LINES]


def host_mitigation_lines(root: HostRoot) -> list[str] | None:
    """The live host's lines (`dmesg`); None where they cannot be read: a host root that is a snapshot
    or a fake, dmesg refused or gone. None is never "the same" as anything."""
    if not root.live:
        return None
    try:
        res = proc.run(["dmesg"], timeout=TIMEOUT, check=False)
    except HarnessError:  # not installed, or past its time
        return None
    if not res.ok:
        return None
    return mitigation_lines(res.stdout.splitlines())
