"""`kvm_modules`: KVM built as modules (a hypervisor mitigation patched into arch/x86/kvm and built with
`make M=arch/x86/kvm` against the running kernel), loaded in place of the stock ones while an
instance's guest runs: e.g. ["/home/me/kvm/kvm.ko", "/home/me/kvm/kvm-amd.ko"]. Here only the form is
checked: absolute paths written plainly (no `.`, `..` or empty parts, no control character: the path
is printed in the run's record and passed to insmod), ending in `.ko`, each file named once. What each
file is (a regular file in folders only root can change, a module of kvm, kvm_amd or kvm_intel built
for the running kernel) is checked on the host before anything is taken: host/inspect/kvm_module.py."""

from __future__ import annotations

from vmharness.errors import HarnessError
from vmharness.model import plainpath

HINT = "write each module's whole path, e.g. [\"/home/me/kvm/kvm.ko\", \"/home/me/kvm/kvm-amd.ko\"]"
MAX = 2  # kvm.ko and one vendor module


def check_module_path(value: str, where: str) -> str:
    """An absolute path, written plainly, of a `.ko` file."""
    plainpath.check(value, where, HINT, "the module")
    if not value.endswith(".ko"):
        raise HarnessError(f"{where} {value!r} does not end in .ko", "name the module file make M=arch/x86/kvm "
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
