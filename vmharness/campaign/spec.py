"""A campaign file: a base configuration of `bench` or `run` and a matrix of axes (a key of that
configuration and its values), expanded into cells, the cartesian product, each one configuration.

Every cell's configuration is checked by the very validator `bench` and `run` use (model/config.py)
before anything is written or submitted: one bad cell refuses the campaign, naming the cell and the key.
A matrix larger than MAX_CELLS is refused by its size before a single cell is made. A cell's name comes
from its values (or the axis's `names`) and is a folder's name, never a path."""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vmharness.errors import HarnessError
from vmharness.experiment.hostboots.plan import needs_host_boots
from vmharness.model import config, tomlfile
from vmharness.model.sections import RunConfig

MAX_CELLS = 10_000  # runs: cells times repeats
MAX_REPEATS = 1000
MAX_PAIRS = 64
MAX_AXES = 16
MAX_KEY_DEPTH = 6
Command = Literal["bench", "run"]
Backend = Literal["local", "slurm"]
KEY = re.compile(r"[a-z_][a-z0-9_]{0,63}(\.([a-z_][a-z0-9_]{0,63}|[0-9]{1,4})){0,5}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")  # one axis value's part of a cell's name
CELL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")  # a cell's name: a folder's name
# Slurm's --constraint: features joined by & | and ,  with brackets, counts (*2) and no blank or shell character
CONSTRAINT = re.compile(r"[A-Za-z0-9_.\-&|,*\[\]]{1,256}")
PARTITION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
FEATURE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # one node feature: a pair's, joined to the constraint with &
HINT = "docs/campaign.md describes a campaign file"


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[Any, ...]
    names: tuple[str, ...]


@dataclass(frozen=True)
class Cell:
    index: int
    name: str
    values: dict[str, Any]  # axis key -> this cell's value
    table: dict[str, Any]  # the whole configuration, checked


@dataclass(frozen=True)
class SlurmOptions:
    constraint: str = ""
    partition: str = ""
    client: Literal["node", "config"] = "node"  # node: every [[client]] is the allocation's second node
    pairs: tuple[str, ...] = ()  # node features, one per pair of nodes: the repetitions are spread over them


@dataclass(frozen=True)
class Campaign:
    source: Path
    command: Command
    backend: Backend
    baseline: str  # the cell every other is compared with
    slurm: SlurmOptions
    axes: tuple[Axis, ...]
    cells: tuple[Cell, ...]
    repeats: int = 1  # runs of each cell, each its own run folder (design.py: on which pair, in what order)
    seed: int = 1  # the design's random order


def _table(data: dict[str, Any], name: str, known: set[str]) -> dict[str, Any]:
    got = data.get(name, {})
    if not isinstance(got, dict):
        raise HarnessError(f"campaign {name} must be a table", HINT)
    unknown = sorted(str(k) for k in set(got) - known)
    if unknown:
        raise HarnessError(f"unknown setting {name}.{unknown[0][:64]!r}",
                           f"known in [{name}]: {', '.join(sorted(known))}")
    return got


def _string(table: dict[str, Any], where: str, key: str, default: str, pattern: re.Pattern[str] | None = None,
            choices: tuple[str, ...] = ()) -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise HarnessError(f"{where}.{key} must be a string, not {type(value).__name__}", HINT)
    if choices and value not in choices:
        raise HarnessError(f"{where}.{key} is {value[:40]!r}: it must be {' or '.join(choices)}", HINT)
    if pattern is not None and value and not pattern.fullmatch(value):
        raise HarnessError(f"{where}.{key} {value[:80]!r} holds a character it may not",
                           f"{where}.{key}: letters, digits and {sorted(set(pattern.pattern) & set('_.-&|,*[]'))}")
    return value


def _axes(data: dict[str, Any]) -> tuple[Axis, ...]:
    raw = data.get("axis", [])
    if not isinstance(raw, list) or not all(isinstance(a, dict) for a in raw):
        raise HarnessError("campaign axis must be an array of tables ([[axis]])", HINT)
    if len(raw) > MAX_AXES:
        raise HarnessError(f"the campaign has {len(raw)} axes (at most {MAX_AXES})", "fold some into the base")
    axes: list[Axis] = []
    for n, a in enumerate(raw, 1):
        where = f"axis {n}"
        unknown = sorted(str(k) for k in set(a) - {"key", "values", "names"})
        if unknown:
            raise HarnessError(f"unknown setting {where}.{unknown[0][:64]!r}", "known in [[axis]]: key, names, values")
        key = a.get("key")
        if not isinstance(key, str) or not KEY.fullmatch(key):
            raise HarnessError(f"{where}.key {str(key)[:80]!r} is not a key of the configuration",
                               "write it as the file's table and key, e.g. sweep.duration or instance.0.cmdline")
        if any(ax.key == key for ax in axes):
            raise HarnessError(f"{where}.key {key} is an axis twice", "give each key one axis with all its values")
        values = a.get("values")
        if not isinstance(values, list) or not values:
            raise HarnessError(f"{where} ({key}) has no values", "give it a list of at least one value: values = [...]")
        names = a.get("names", [_slug(v) for v in values])
        if not isinstance(names, list) or len(names) != len(values):
            raise HarnessError(f"{where}.names must be a list of {len(values)} names, one per value", HINT)
        for name in names:
            if not isinstance(name, str) or not NAME.fullmatch(name):
                raise HarnessError(f"{where}.names: {str(name)[:80]!r} is not a name for a folder",
                                   "letters, digits, '.', '_' and '-', starting with a letter or digit (never a path)")
        if "names" in a:  # named apart, one value may be two cells on purpose (an A/A pair)
            _once(where, "names", names, "give each of an axis's names once")
        else:
            _once(where, "values", [json.dumps(v, sort_keys=True, default=str) for v in values],
                  "give each value once, or name each (names = [...]) to run one configuration as two cells")
        axes.append(Axis(key, tuple(values), tuple(names)))
    return tuple(axes)


def _once(where: str, what: str, items: list[str], hint: str) -> None:
    """Each item once: two equal names would be one label for two cells, and two equal values, unnamed,
    two cells of one configuration that only their index tells apart."""
    first: dict[str, int] = {}
    for i, item in enumerate(items, 1):
        if item in first:
            raise HarnessError(f"{where}.{what} gives {item[:80]!r} twice (its entries {first[item]} and {i})", hint)
        first[item] = i


def _slug(value: Any) -> str:
    """A value as a part of a folder's name: what is not a letter, digit, '.', '_' or '-' becomes '-'."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", str(value).lower() if isinstance(value, bool) else str(value))
    return text.strip(".-")[:40] or "x"


def cell_name(index: int, parts: list[str]) -> str:
    """`0003-duration-2_cmdline-mitigations-off`: the index keeps names apart, the rest says what it is."""
    name = f"{index:04d}-" + "_".join(parts)
    return name[:112]  # and a repetition's "-r999" after it


def _set(table: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted `key` in `table`: a table the base leaves out is made (its settings at their
    defaults; a misspelt one is then an unknown setting to the validator), an array of tables must be
    there and is indexed by number, and a value is never walked into."""
    *path, last = key.split(".")
    node: Any = table
    for depth, part in enumerate(path):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise HarnessError(f"{'.'.join(path[:depth])} has {len(node)} tables: no {part}",
                                   "index an array of tables from 0, e.g. instance.0.cmdline")
            node = node[int(part)]
        elif isinstance(node, dict):
            if part not in node:
                node[part] = {}
            node = node[part]
        if not isinstance(node, dict | list):
            raise HarnessError(f"{'.'.join(path[:depth + 1])} is a value, not a table", "name a key inside a table")
    if isinstance(node, list):
        raise HarnessError(f"{key}: {'.'.join(path)} is an array of tables", "index it, e.g. instance.0.cmdline")
    node[last] = copy.deepcopy(value)


def _int(table: dict[str, Any], where: str, key: str, default: int, low: int, high: int) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise HarnessError(f"{where}.{key} must be a whole number, not {type(value).__name__}", HINT)
    if not low <= value <= high:
        raise HarnessError(f"{where}.{key} is {value}: it must be {low} to {high:,}", HINT)
    return value


def _pairs(table: dict[str, Any], constraint: str) -> tuple[str, ...]:
    """[slurm] pairs: node features, each one pair's; joined to the constraint with & (so the constraint
    may hold only features and &: a | or a bracket would change what the & binds)."""
    raw = table.get("pairs", [])
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise HarnessError("slurm.pairs must be a list of node features (strings)", 'e.g. pairs = ["pair1", "pair2"]')
    if len(raw) > MAX_PAIRS:
        raise HarnessError(f"slurm.pairs names {len(raw)} pairs (at most {MAX_PAIRS})", "name fewer pairs")
    for p in raw:
        if not FEATURE.fullmatch(p):
            raise HarnessError(f"slurm.pairs: {p[:80]!r} is not a node feature",
                               "letters, digits, '.', '_' and '-': one feature of slurm.conf's Features=")
        if raw.count(p) > 1:
            raise HarnessError(f"slurm.pairs names {p!r} twice", "name each pair's feature once")
    if raw and not re.fullmatch(r"[A-Za-z0-9_.&-]*", constraint):
        raise HarnessError(f"slurm.constraint {constraint[:80]!r} with slurm.pairs may join features only by &",
                           "each element asks for constraint&PAIR: write the constraint as features joined by &")
    return tuple(raw)


def matrix_size(axes: tuple[Axis, ...]) -> int:
    return math.prod(len(a.values) for a in axes)


def expand(command: Command, base: dict[str, Any], axes: tuple[Axis, ...]) -> tuple[Cell, ...]:
    size = matrix_size(axes)
    if size > MAX_CELLS:
        raise HarnessError(f"the matrix has {size:,} cells (at most {MAX_CELLS:,})", "split it into campaigns, "
                           "or give the axes fewer values")
    check = config.bench_from_table if command == "bench" else config.run_from_table
    cells = []
    for index, combo in enumerate(itertools.product(*(range(len(a.values)) for a in axes))):
        name = cell_name(index, [f"{a.key.rsplit('.', 1)[-1]}-{a.names[i]}" for a, i in zip(axes, combo, strict=True)])
        table = copy.deepcopy(base)
        values = {a.key: a.values[i] for a, i in zip(axes, combo, strict=True)}
        try:
            for key, value in values.items():
                _set(table, key, value)
            checked = check(table)
        except HarnessError as exc:
            raise HarnessError(f"cell {name}: {exc.message}", exc.hint) from exc
        if isinstance(checked, RunConfig) and needs_host_boots(checked):
            raise HarnessError(f"cell {name}: its run reboots the host between host boots ([[host_boot]] or "
                               "study.host_switches), which would end the campaign's job or its submit",
                               "run host boots as one `vmharness run --allow-host-reboot` on the host; "
                               "a campaign's cells keep the boot they start in")
        cells.append(Cell(index, name, values, table))
    return tuple(cells)


def load(path: Path) -> Campaign:
    data = tomlfile.read(path, HarnessError(f"no campaign file {path}", "pass the path of a TOML file"))
    unknown = sorted(str(k) for k in set(data) - {"campaign", "base", "slurm", "axis"})
    if unknown:
        raise HarnessError(f"{path}: unknown table {unknown[0][:64]!r}", "known: campaign, base, slurm, axis")
    head = _table(data, "campaign", {"command", "base", "backend", "baseline", "repeats", "seed"})
    command: Command = _string(head, "campaign", "command", "bench", choices=("bench", "run"))  # type: ignore[assignment]
    backend: Backend = _string(head, "campaign", "backend", "local", choices=("local", "slurm"))  # type: ignore[assignment]
    base_file = _string(head, "campaign", "base", "")
    if base_file and "base" in data:
        raise HarnessError("the campaign has both campaign.base and a [base] table", "give one of them")
    if base_file:
        file = path.parent / base_file
        base = tomlfile.read(file, HarnessError(f"campaign.base: no configuration file {file}",
                                                "name it relative to the campaign file"))
    else:
        base = _table(data, "base", set(data.get("base", {}) if isinstance(data.get("base"), dict) else ()))
    s = _table(data, "slurm", {"constraint", "partition", "client", "pairs"})
    constraint = _string(s, "slurm", "constraint", "", CONSTRAINT)
    slurm = SlurmOptions(constraint, _string(s, "slurm", "partition", "", PARTITION),
                         _string(s, "slurm", "client", "node", choices=("node", "config")),  # type: ignore[arg-type]
                         _pairs(s, constraint))
    repeats = _int(head, "campaign", "repeats", 1, 1, MAX_REPEATS)
    seed = _int(head, "campaign", "seed", 1, 0, 2**63 - 1)
    axes = _axes(data)
    if matrix_size(axes) * repeats > MAX_CELLS:
        raise HarnessError(f"the campaign has {matrix_size(axes) * repeats:,} runs ({matrix_size(axes):,} cells, "
                           f"{repeats} repeats; at most {MAX_CELLS:,})", "split it into campaigns, or repeat less")
    cells = expand(command, base, axes)
    baseline = _string(head, "campaign", "baseline", cells[0].name)
    if baseline not in {c.name for c in cells}:
        raise HarnessError(f"campaign.baseline {baseline[:80]!r} is not one of the cells", f"e.g. {cells[0].name}")
    return Campaign(path, command, backend, baseline, slurm, axes, cells, repeats, seed)
