"""CPU sets in the kernel's bitmap format (rps_cpus, smp_affinity): hex in comma-separated 32-bit
groups, most significant first, as many groups as the machine has possible CPUs. A 128-CPU mask is
`ffffffff,ffffffff,ffffffff,ffffffff`; one 32-digit string is what the kernel rejects (seed 003)."""

from __future__ import annotations

from vmharness.errors import HarnessError


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
    try:
        value = int(digits or "0", 16)
    except ValueError:
        raise HarnessError(f"{text.strip()!r} is not a CPU mask",
                           "write hex, e.g. fffe0000 or ffffffff,ffffffff") from None
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)
