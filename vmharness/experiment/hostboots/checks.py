"""What a run with host boots checks before it takes anything: that kexec can work on this host, and
that the person running it agreed to reboot it, having been told what a reboot ends. Pure functions of
a HostRoot (and the environment), so a test's fake root or a snapshot answers as the live host would.

- kexec support: the kernel was built with it (/sys/kernel/kexec_loaded exists) and kexec-tools'
  `kexec` is installed (the harness runs `kexec -l` and `kexec -e`).
- Kernel lockdown (/sys/kernel/security/lockdown, the mode in brackets): with `integrity` or
  `confidentiality` the kernel refuses kexec_load (what `kexec -l` uses) and takes only kexec_file_load
  (`kexec -s`) of a kernel signed with a key it trusts; the harness loads with kexec_load, so a locked
  down host is refused with the reason.
- Consent: a host boot ends every process on the host. Without `--allow-host-reboot` the run refuses,
  and says what the reboot would end: the other users' sessions (utmp), the libvirt guests that are not
  the run's, and the SSH session the run came in on."""

from __future__ import annotations

from collections.abc import Sequence

from vmharness import textsafe
from vmharness.errors import HarnessError
from vmharness.host.inspect import logins
from vmharness.host.inspect.net import ssh_route
from vmharness.host.inspect.vfio_users import LIBVIRT_RUN
from vmharness.system.root import HostRoot

KEXEC_LOADED = "sys/kernel/kexec_loaded"
LOCKDOWN = "sys/kernel/security/lockdown"
KEXEC_PLACES = ("usr/sbin/kexec", "sbin/kexec", "usr/bin/kexec", "bin/kexec")
FLAG = "--allow-host-reboot"


def kexec_program(root: HostRoot) -> str | None:
    """Where kexec-tools' kexec is on the host ("/usr/sbin/kexec"), or None."""
    return next(("/" + p for p in KEXEC_PLACES if root.exists(p)), None)


def lockdown(root: HostRoot) -> str:
    """The kernel's lockdown mode: "none", "integrity" or "confidentiality" (none without the file)."""
    text = root.read_optional(LOCKDOWN)
    if not text:
        return "none"
    active = [w.strip("[]") for w in text.split() if w.startswith("[") and w.endswith("]")]
    if len(active) != 1 or active[0] not in ("none", "integrity", "confidentiality"):
        raise HarnessError(f"/{LOCKDOWN} holds {text[:80]!r}, not a lockdown mode in brackets",
                           "the host root is damaged, or this kernel writes something vmharness does not know")
    return active[0]


def check_kexec(root: HostRoot) -> str:
    """The kexec program's path once kexec can work on the host, or one HarnessError saying why not."""
    if not root.exists(KEXEC_LOADED):
        raise HarnessError("host boots need kexec, and this kernel has none (no /sys/kernel/kexec_loaded)",
                           "boot a kernel built with CONFIG_KEXEC, or run the host boots as separate runs")
    program = kexec_program(root)
    if program is None:
        raise HarnessError("host boots need kexec-tools' kexec, and it is not installed (no /usr/sbin/kexec)",
                           "apt-get install kexec-tools (say No to \"handle reboots\")")
    mode = lockdown(root)
    if mode != "none":
        raise HarnessError(f"the kernel is locked down ({mode}): it refuses kexec_load, which kexec -l uses, and "
                           "would take only a signed kernel through kexec_file_load",
                           "boot the host without lockdown (lockdown= off the command line, Secure Boot off) "
                           "to run host boots")
    return program


def running_guests(root: HostRoot) -> list[str]:
    """The libvirt guests running on the host (libvirt's status files): before a run starts none is the
    run's, and a reboot ends each."""
    return sorted(textsafe.line(n[:-4])[:80] for n in root.listdir(LIBVIRT_RUN) if n.endswith(".xml"))


def reboot_ends(root: HostRoot, foreign_guests: Sequence[str] = ()) -> list[str]:
    """What a host boot would end, one line each: the user sessions (utmp), the libvirt guests that are
    not the run's (`foreign_guests`, named by the caller, who knows its own), and the SSH session the
    run came in on."""
    out = [f"the login session of {s}" for s in logins.sessions(root)]
    out += [f"the libvirt guest {name}" for name in foreign_guests]
    ssh = ssh_route.session(root)
    if ssh:
        out.append(f"this SSH session ({ssh[:80]}): the run goes on without it; follow it from a new one")
    return out


def consent(allowed: bool, ends: Sequence[str], switches: int) -> None:
    """Refuse without --allow-host-reboot, saying what the reboots would end."""
    if allowed:
        return
    what = "; ".join(ends[:4]) + (f"; and {len(ends) - 4} more" if len(ends) > 4 else "") if ends else \
        "every process on the host"
    raise HarnessError(f"this run reboots the host {switches} times (kexec), which ends {what}",
                       f"add {FLAG} once that may end; run --print-xml shows each host boot")
