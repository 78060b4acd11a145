"""The runs of a campaign: each cell `repeats` times, each repetition a run folder of its own, and where
Slurm may put it. With `[slurm] pairs` the repetitions are blocked by pair: in each round of as many
repetitions as there are pairs, every cell runs once on every pair (the last round, when the repeats are
not a multiple of the pairs, on a random part of them), so that a cell's runs do not all land on one
pair and the pair's effect is not confounded with the cell's. Which pair a repetition gets within its
round, and the order of the runs within a round, are drawn from the campaign's seed; the design is
written into campaign.json, so a later `submit` and the report read the very same one.

With one repetition and no pairs, the runs are the cells, named and ordered as before."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Run:
    name: str  # its folder's name: the cell's, with -rN after it when the cell is repeated
    cell: str
    repeat: int
    pair: str  # the node feature it must run on ("": wherever Slurm, or this machine, puts it)

    def json(self) -> dict[str, Any]:
        return {"name": self.name, "cell": self.cell, "repeat": self.repeat, "pair": self.pair}


def run_name(cell: str, repeat: int, repeats: int) -> str:
    return cell if repeats == 1 else f"{cell}-r{repeat}"


def runs(cells: Sequence[str], repeats: int, pairs: Sequence[str], seed: int) -> list[Run]:
    """Every cell's repetitions in the order they are to run, each with its pair."""
    rng = random.Random(seed)
    width = max(1, len(pairs))
    out: list[Run] = []
    for first in range(0, repeats, width):
        block: list[Run] = []
        for cell in cells:
            order = list(pairs) or [""]
            if pairs:
                rng.shuffle(order)
            for k, pair in enumerate(order[:repeats - first]):
                block.append(Run(run_name(cell, first + k, repeats), cell, first + k, pair))
        if repeats > 1:
            rng.shuffle(block)  # the order within a round: drift over time falls on no cell more than another
        out += block
    return out
