"""Reading a configuration: bench's or run's TOML file (none: every default, or for run the embedded
experiment, vmharness/data/default-run.toml), or the one a run folder's manifest stores (for --resume),
to the model (model/sections.py) with what it implies (model/derived.py) and, for a file, the rules
that span settings checked (model/rules.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vmharness import data
from vmharness.errors import HarnessError
from vmharness.model import schema, tomlfile
from vmharness.model.derived import with_control, with_pipelines, with_study
from vmharness.model.hoststudy import with_host_switches
from vmharness.model.rules import validate
from vmharness.model.sections import BenchConfig, RunConfig


def _read(path: Path) -> dict[str, Any]:
    return tomlfile.read(path, HarnessError(f"no configuration file {path}", "pass the path of a TOML file"))


def load(path: Path | None) -> BenchConfig:
    """bench's configuration in `path` (None: every default: nginx and wrk on this machine)."""
    return bench_from_table(_read(path)) if path else validate(with_pipelines(BenchConfig()))


def load_run(path: Path | None) -> RunConfig:
    """run's configuration in `path` (None: the embedded experiment, default-run.toml)."""
    return run_from_table(_read(path or data.DEFAULT_RUN))


def bench_from_table(table: dict[str, Any]) -> BenchConfig:
    """bench's configuration from a TOML file's table, checked as `load` checks a file (a campaign's cells)."""
    return validate(with_pipelines(schema.table("config", BenchConfig, table)))


def run_from_table(table: dict[str, Any]) -> RunConfig:
    """run's configuration from a TOML file's table, checked as `load_run` checks a file."""
    return validate(_implied(schema.table("config", RunConfig, table)))


def from_json(manifest: dict[str, Any]) -> BenchConfig:
    """A bench configuration as its manifest stores it (for --resume)."""
    return with_pipelines(schema.table("config", BenchConfig, manifest))


def run_from_json(manifest: dict[str, Any]) -> RunConfig:
    return _implied(schema.table("config", RunConfig, manifest))


def _implied(cfg: RunConfig) -> RunConfig:
    """A run's configuration with what it implies: its host switches' and its study's instances, the
    pipeline twins, the control."""
    return with_control(with_pipelines(with_study(with_host_switches(cfg))))
