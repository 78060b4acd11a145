"""`claim_unmitigated`: the `*-no` bits of an instance's cpu_features that it shows its guest although the
host's CPU lacks them, on purpose (a study of what the mitigation costs). Here only the names' form is
checked; host/inspect/cpubits.py refuses, before a run, such a bit that the instance does not claim."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")  # a cpu_features name without its + or -


def check_claim(value: str, where: str) -> str:
    if not NAME.fullmatch(value):
        raise HarnessError(f"{where} {value[:80]!r} is not a CPU feature's name",
                           'name the bits as cpu_features does, without the +, e.g. ["mds-no"]')
    return value
