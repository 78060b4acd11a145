"""The kernel's attack-vector controls as switches of a study (Linux 6.17 and later:
Documentation/admin-guide/hw-vuln/attack_vector_controls.rst): `mitigations=auto,no_user_kernel` turns
off every mitigation that guards the kernel from user space (on an Intel CPU identity, PTI among them),
and so on for each vector. The guest's are user_kernel, user_user and cross_thread; the host's (what
guards it and its guests from a guest) guest_host and guest_guest. Every vector a cmdline turns off is
one word, `mitigations=auto,no_A,no_B`, so that no word of the kernel's parsing is left to chance.

A kernel before 6.17 reads such a word as an unsupported value of mitigations= and keeps every
mitigation on: the instance would measure its reference again under another name. So a vector switch is
refused where the kernel's release is known and older: the host boot's (its bzImage's header, read
before anything is taken: experiment/hostboots/target.py), the guest's (the instance's bzImage or its
image's release, when its guest is planned: guest/instance.py; else the release its guest reports, at
its boot: experiment/runner.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from vmharness.model import kernel_cmdline

SINCE = (6, 17)  # the first release with the attack-vector controls
GUEST = ("user_kernel", "user_user", "cross_thread")
HOST = ("guest_host", "guest_guest")
EVERY = (*GUEST, *HOST)


def word(names: Sequence[str]) -> str:
    """The one cmdline word that turns the vectors `names` off, every other mitigation as the kernel chooses."""
    return "mitigations=auto," + ",".join(f"no_{n}" for n in names)


def named(line: str) -> list[str]:
    """The attack vectors `line` turns off, as the kernel reads its mitigations= words, in order."""
    out: list[str] = []
    for p in kernel_cmdline.parse(line).params:
        if p.key == "mitigations" and p.value:
            out += [t.removeprefix("no_") for t in p.value.split(",")[1:] if t.removeprefix("no_") in EVERY]
    return out


def _version(release: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else None


def refused(line: str, release: str | None) -> str | None:
    """Why a kernel of `release` cannot take `line`: it turns an attack vector off and the kernel is
    older than SINCE. None when it can, or when the release is not known (None, "?": the run checks)."""
    vectors = named(line)
    version = _version(release or "")
    if not vectors or version is None or version >= SINCE:
        return None
    return (f"the attack-vector controls ({', '.join(vectors)}) need Linux {SINCE[0]}.{SINCE[1]} or later, and the "
            f"kernel is {(release or '')[:60]!r}: it would read them as an unsupported mitigations= value and keep "
            "every mitigation on")


HINT = (f"boot a kernel of Linux {SINCE[0]}.{SINCE[1]} or later, or switch the mitigations one by one "
        "(pti, spectre_v2, ...)")
