"""`kvm_modules`: KVM built as modules (a hypervisor mitigation patched into arch/x86/kvm and built with
`make M=arch/x86/kvm` against the running kernel), loaded in place of the stock ones while an
instance's guest runs: e.g. ["/home/me/kvm/kvm.ko", "/home/me/kvm/kvm-amd.ko"]. Here only the form is
checked: absolute paths written plainly (no `.`, `..` or empty parts, no control character: the path
is printed in the run's record and passed to insmod), ending in `.ko`, each file named once. What each
file is (a regular file in folders only root can change, a module of kvm, kvm_amd or kvm_intel built
for the running kernel) is checked on the host before anything is taken: host/inspect/kvm_module.py."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

HINT = "write each module's whole path, e.g. [\"/home/me/kvm/kvm.ko\", \"/home/me/kvm/kvm-amd.ko\"]"
MAX = 2  # kvm.ko and one vendor module
_PLAIN = re.compile(r"[A-Za-z0-9_.,+@%=:~/-]{1,4000}")


def check_module_path(value: str, where: str) -> str:
    """An absolute path, written plainly, of a `.ko` file."""
    shown = repr(value[:80])
    if not _PLAIN.fullmatch(value):
        raise HarnessError(f"{where} {shown} has a character other than letters, digits and _.,+@%=:~/- "
                           "(a space, a newline, a quote)", "keep the module in a folder with a plain name")
    if not value.startswith("/"):
        raise HarnessError(f"{where} {shown} is not an absolute path", HINT)
    if any(part in ("", ".", "..") for part in value[1:].split("/")):
        raise HarnessError(f"{where} {shown} is not written plainly (a '.', '..' or '//' in it, or a '/' at "
                           "its end)", HINT)
    if not value.endswith(".ko"):
        raise HarnessError(f"{where} {shown} does not end in .ko", "name the module file make M=arch/x86/kvm "
                           "built (kvm.ko, kvm-amd.ko or kvm-intel.ko; a compressed .ko.xz is not taken)")
    return value


def check_module_paths(values: tuple[str, ...], where: str) -> tuple[str, ...]:
    """At most MAX files, none named twice (which module each is, is read from the file on the host)."""
    if len(values) > MAX:
        raise HarnessError(f"{where} names {len(values)} files; at most {MAX} (kvm.ko and the vendor's)", HINT)
    if len(set(values)) != len(values):
        raise HarnessError(f"{where} names {values[0]!r} twice" if values[0] == values[-1] else
                           f"{where} names a file twice", HINT)
    return values
