"""CPU sets in the kernel's two spellings, kept together in a leaf module so that any layer may use
them without importing up (guest placement, provenance and tuning all read them):

- lists, as in `/sys/devices/system/cpu/online` and `nodeN/cpulist`: `0-3,8,10-11`;
- bitmaps, as in `rps_cpus` and `smp_affinity`: hex in comma-separated 32-bit groups, most significant
  first, as many groups as the machine has possible CPUs. A 128-CPU mask is
  `ffffffff,ffffffff,ffffffff,ffffffff`; one 32-digit string is what the kernel rejects (seed 003).

Both are read from host files that may be damaged, so a bad one is a one-line error naming where it
came from, and CPU numbers are capped: the kernel allows at most 8192 CPUs (CONFIG_NR_CPUS), and a
range such as `0-4000000000` must not be expanded."""

from __future__ import annotations

import re

from vmharness.errors import HarnessError

MAX_CPUS = 8192
_RANGE = re.compile(r"([0-9]{1,5})(?:-([0-9]{1,5}))?")


def parse_cpulist(text: str, where: str = "cpu list") -> tuple[int, ...]:
    """`0-3,8,10-11` -> (0, 1, 2, 3, 8, 10, 11), as the kernel writes lists (one trailing newline
    allowed); an empty list (a node without CPUs) is (). `where` names the source. Strict: an empty
    element (`0,,2`, `0,`), a CPU named twice (`0,0`, `0-3,2`), a reversed range, a blank, a sign or a
    digit that is not ASCII is no list the kernel writes, and reading one anyway would pin two threads
    meant for two CPUs onto one."""
    body = text[:-1] if text.endswith("\n") else text
    if not body:
        return ()
    cpus: list[int] = []
    seen: set[int] = set()
    for part in body.split(","):
        m = _RANGE.fullmatch(part)
        first, last = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (0, -1)
        fault = ("an empty element" if not part else f"{part[:20]!r} is not N or N-M in ASCII digits" if not m
                 else f"the range {part} runs backwards" if last < first
                 else f"CPU {last} is beyond the kernel's {MAX_CPUS}" if last >= MAX_CPUS
                 else f"CPU {min(seen.intersection(range(first, last + 1)))} is named twice"
                 if not seen.isdisjoint(range(first, last + 1)) else "")
        if fault:
            raise HarnessError(f"{where}: {body[:80]!r} is not a CPU list: {fault}",
                               f"the kernel writes them as 0-3,8,10-11 (CPUs 0 to {MAX_CPUS - 1}, each once)")
        cpus += range(first, last + 1)
        seen.update(range(first, last + 1))
    return tuple(cpus)


def format_cpulist(cpus: tuple[int, ...] | set[int]) -> str:
    """(0, 1, 2, 3, 8, 10, 11) -> `0-3,8,10-11`, as the kernel writes lists (e.g. smp_affinity_list)."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def format_mask(cpus: set[int] | frozenset[int], nr_cpus: int) -> str:
    bad = sorted(c for c in cpus if c < 0 or c >= nr_cpus)
    if bad:
        raise HarnessError(f"CPU {bad[0]} does not exist here (CPUs 0-{nr_cpus - 1})", "name CPUs this machine has")
    value = sum(1 << c for c in cpus)
    groups = max(1, (nr_cpus + 31) // 32)
    return ",".join(f"{(value >> (32 * g)) & 0xFFFFFFFF:08x}" for g in reversed(range(groups)))


def parse_mask(text: str) -> frozenset[int]:
    """The CPUs in a mask as the kernel prints it (or as a user writes it, commas or not)."""
    digits = text.strip().replace(",", "")
    if not re.fullmatch(r"[0-9a-fA-F]*", digits) or len(digits.lstrip("0")) * 4 > MAX_CPUS:
        raise HarnessError(f"{text.strip()[:80]!r} is not a CPU mask",
                           "write hex, e.g. fffe0000 or ffffffff,ffffffff")
    value = int(digits or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)
