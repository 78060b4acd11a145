"""Plain fixed-width text tables: stable output that reads the same in a terminal, a log or a README."""

from __future__ import annotations

from collections.abc import Sequence

from vmharness.textsafe import line as one_line


def render(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """The table's lines; a cell's control characters escaped (a name cannot break its row)."""
    header = [one_line(h) for h in header]
    rows = [[one_line(c) for c in row] for row in rows]
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(widths[i]) for i, c in enumerate(cells)]
        return (indent + "  ".join(padded)).rstrip()

    return [line(header)] + [line(r) for r in rows]
