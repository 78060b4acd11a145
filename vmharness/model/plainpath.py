"""A path a configuration names for a file the host runs or loads (a QEMU binary, a KVM module, a host
boot's kernel and initrd): absolute, because the program that opens it runs elsewhere (libvirt's
daemon, insmod, kexec) and a relative path would mean its folder, not the researcher's; written
plainly, without `.`, `..` or empty parts, so that the path recorded is the file read; and of plain
characters only, because it is printed in records and passed as an argument. What the file is, is
checked on the host before anything is taken (host/inspect/)."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

_PLAIN = re.compile(r"[A-Za-z0-9_.,+@%=:~/-]{1,4000}")


def check(value: str, where: str, hint: str, what: str) -> str:
    """`value` as it was, or a one-line error naming `where`; `hint`: how to write the path; `what`: the
    file, as the error's hint names it (\"the kernel\")."""
    shown = repr(value[:80])
    if not _PLAIN.fullmatch(value):
        raise HarnessError(f"{where} {shown} has a character other than letters, digits and _.,+@%=:~/- "
                           "(a space, a newline, a quote)", f"keep {what} in a folder with a plain name")
    if not value.startswith("/"):
        raise HarnessError(f"{where} {shown} is not an absolute path", hint)
    if any(part in ("", ".", "..") for part in value[1:].split("/")):
        raise HarnessError(f"{where} {shown} is not written plainly (a '.', '..' or '//' in it, or a '/' at "
                           "its end)", hint)
    return value
