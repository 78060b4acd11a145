"""An instance's `qemu_args` as vmharness accepts them: an allow-list, because they reach QEMU's command
line as libvirt runs it (guest/domain.py writes them into <qemu:commandline>), as root on the host, and
most of QEMU's options can run a program (`-incoming exec:`, a tap's `script=`, `-plugin`), open a
control socket or a port (`-monitor tcp:`, `-qmp`, `-gdb`, `-s`, `-chardev socket`), read or write a
host file (`-drive file=`, `-chardev file`, `-D`, `-pidfile`, `-readconfig`, `-bios`, `-kernel`, a bare
word, which QEMU takes as a disk image) or loosen QEMU itself (`-sandbox off`, `-runas`, `-chroot`).

What `qemu_args` is for is what a study of a mitigation's cost needs beside what the other keys say (the
CPU's bits are `cpu_features`', checked against the host before a run; its vCPUs, memory and devices
are [guest]'s): the guest CPU's identity and a device's tuning property, and a tag the guest can read
back. So it takes pairs, an option and its value, of two options only:

- `-global DRIVER.PROPERTY=VALUE`: a device's property, e.g. `kvm-pit.lost_tick_policy=delay`, or the
  CPU's identity, e.g. `max-x86_64-cpu.family=23`. Names of letters, digits, '_' and '-' (the
  property without '.'), a value of letters, digits and '_', '.', ':', '+', '-'. A property whose name
  speaks of a file, a path, a ROM, a device or backend it connects to, a script, a descriptor, a host
  device, a socket, a log, a folder, a command or a secret is refused (`romfile=` reads a host file
  into the guest). On a CPU (a driver ending in -cpu, or one of its ancestors: `cpu`, `device`,
  `object`, `x86_64-cpu`, `i386-cpu`: a global applies to every type below the one named) only the
  identity: family, model, stepping, vendor; a bit set there would pass the `*-no` claim check;
- `-smbios type=N,FIELD=VALUE,...`: an SMBIOS string the guest reads back as its machine's name (type
  0, 1, 2, 3, 4 or 17, each field once, of those that hold a string or a number; never `file=` or
  type 11's `path=`, which read host files), values as above.

Each option is written as QEMU's manual writes it, alone in its string, its value the next string.
Anything else is refused by name with the list of what is allowed (docs/safety.md says why)."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

HINT = ('qemu_args takes only ["-global", "DRIVER.PROPERTY=VALUE"] and ["-smbios", "type=N,FIELD=VALUE,..."] '
        "(docs/run.md; docs/safety.md says why)")
_NAME = r"[A-Za-z][A-Za-z0-9_-]{0,62}"
VALUE = re.compile(r"[A-Za-z0-9_.:+-]{1,64}")
GLOBAL = re.compile(rf"(?P<driver>{_NAME})\.(?P<prop>{_NAME})=(?P<value>.*)")
# in a property's name: it names something on the host, or a backend that does
NAMES_A_THING = ("file", "path", "rom", "dev", "drive", "script", "fd", "host", "sock", "log", "dir", "exec",
                 "cmd", "secret", "tls", "url", "mem", "chr", "backend")
CPU_ANCESTORS = ("object", "device", "cpu", "x86_64-cpu", "i386-cpu")
CPU_IDENTITY = ("family", "model", "stepping", "vendor")
SMBIOS_TYPES = ("0", "1", "2", "3", "4", "17")
SMBIOS_FIELDS = ("vendor", "version", "date", "release", "uefi", "manufacturer", "product", "serial", "uuid",
                 "sku", "family", "asset", "location", "part", "sock_pfx", "max-speed", "current-speed",
                 "processor-family", "processor-id", "loc_pfx", "bank", "speed")


def _global(value: str) -> str | None:
    """Why `-global VALUE` is refused, or None."""
    m = GLOBAL.fullmatch(value)
    if m is None:
        return "is not DRIVER.PROPERTY=VALUE (letters, digits, '_' and '-' in the names)"
    driver, prop = m.group("driver"), m.group("prop").lower()
    if not VALUE.fullmatch(m.group("value")):
        return "has a value that is not 1 to 64 letters, digits, '_', '.', ':', '+' or '-'"
    if thing := next((t for t in NAMES_A_THING if t in prop), None):
        return f"sets the property {m.group('prop')}, which names a {thing}: refused (it may reach a host file, " \
               "device or program)"
    if (driver.lower().endswith("-cpu") or driver.lower() in CPU_ANCESTORS) and prop not in CPU_IDENTITY:
        return f"sets the CPU property {m.group('prop')}: a CPU's bits are cpu_features' (checked against the host " \
               f"before a run), -global sets only its identity: {', '.join(CPU_IDENTITY)}"
    return None


def _smbios(value: str) -> str | None:
    """Why `-smbios VALUE` is refused, or None."""
    items = value.split(",")
    kind, eq, number = items[0].partition("=")
    if kind != "type" or not eq or number not in SMBIOS_TYPES:
        return f"does not start with type=N, N one of {', '.join(SMBIOS_TYPES)}"
    seen: set[str] = set()
    for item in items[1:]:
        name, eq, val = item.partition("=")
        if name not in SMBIOS_FIELDS:
            return f"sets the field {name[:30]!r}, not one of the strings vmharness takes (file= and path= read " \
                   "host files)"
        if not eq or not VALUE.fullmatch(val) or name in seen:
            return f"sets the field {name} twice" if name in seen else \
                f"has a value of {name} that is not 1 to 64 letters, digits, '_', '.', ':', '+' or '-'"
        seen.add(name)
    return None


OPTIONS = {"-global": _global, "-smbios": _smbios}


def check(args: tuple[str, ...], where: str) -> tuple[str, ...]:
    """`args` as pairs of an allowed option and its value, returned unchanged; else a HarnessError naming
    `where[i]`, the string refused and why."""
    for i in range(0, len(args), 2):
        option = args[i]
        if option not in OPTIONS:
            why = "is not an option (QEMU would open it as a disk image)" if not option.startswith("-") else \
                "is not allowed: qemu_args takes -global and -smbios only, each alone in its string"
            raise HarnessError(f"{where}[{i}] {option[:80]!r} {why}", HINT)
        if i + 1 == len(args):
            raise HarnessError(f"{where}[{i}] {option} has no value (the next string)", HINT)
        if why_not := OPTIONS[option](args[i + 1]):
            raise HarnessError(f"{where}[{i + 1}] {args[i + 1][:80]!r} (of {option}) {why_not}", HINT)
    return args
