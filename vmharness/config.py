"""The experiment model and its TOML form, validated in one place: every table is a frozen dataclass
whose fields (name, type, default) are the whole schema; an unknown key, a wrong type or a bad value
is an error naming `table.key`."""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from vmharness import tomlfile
from vmharness.bench import connections as conn_spec
from vmharness.errors import HarnessError


@dataclass(frozen=True)
class ServerSection:
    host: str = "local"  # "local" or an ssh name from ~/.ssh/config
    url: str = "http://127.0.0.1:8080/"  # what the clients request
    listen: str = "127.0.0.1:8080"
    workers: int = 0  # 0: one per CPU of the server
    worker_connections: int = 1024
    filesize: int = 64
    mode: str = "file"  # file | return


@dataclass(frozen=True)
class InstanceSection:
    name: str
    nginx: str = "nginx"  # the server binary (an instrumented build, say)
    config: str = ""  # an nginx.conf used as it is instead of the template


@dataclass(frozen=True)
class ClientSection:
    host: str = "local"
    threads: int = 0  # 0: min(connections, the client's CPUs)
    wrk: str = "wrk"


@dataclass(frozen=True)
class SweepSection:
    connections: str = "16:256:16,256:1024:128,1024:1536:256"
    iterations: int = 3
    duration: int = 30  # seconds; wrk takes whole seconds
    wait: float = 1.0
    warmup: int = 5
    timeout: int = 10  # wrk --timeout, well above the expected tail
    retries: int = 2
    margin: float = 15.0  # a wrk still running duration + timeout + margin after its start is hung
    restart_server_between_runs: bool = False
    interleave: str = "point"  # point: every instance at each point; iteration: a whole sweep each
    rate: int = 0  # requests/s for wrk2's fixed-rate mode (client.wrk must be wrk2); 0: wrk's closed loop
    until_ci: float = 0.0  # > 0: more iterations until each point's 95% interval is within ± this share
    max_iterations: int = 10  # ... but never more than this many


@dataclass(frozen=True)
class SamplerSection:
    interval: float = 1.0


@dataclass(frozen=True)
class TuningSection:
    profile: str = "none"  # none, seeds or a profile TOML file (docs/tuning.md)
    server_iface: tuple[str, ...] = ()  # the NICs to tune on the server; default: those backed by a device
    client_iface: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchConfig:
    server: ServerSection = field(default_factory=ServerSection)
    instance: tuple[InstanceSection, ...] = (InstanceSection("baseline"),)
    client: tuple[ClientSection, ...] = (ClientSection(),)
    sweep: SweepSection = field(default_factory=SweepSection)
    samplers: SamplerSection = field(default_factory=SamplerSection)
    tuning: TuningSection = field(default_factory=TuningSection)

    @property
    def counts(self) -> tuple[int, ...]:
        return conn_spec.parse(self.sweep.connections)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


T = TypeVar("T")


def _value(where: str, kind: Any, value: Any) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in (str, int, float, bool):
        if type(value) is not kind:
            raise HarnessError(f"{where} must be {kind.__name__}, not {type(value).__name__} ({value!r})",
                               "see docs/bench.md for every setting")
        return value
    if get_origin(kind) is tuple and get_args(kind)[0] is str:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise HarnessError(f"{where} must be an array of strings", "e.g. [\"eth0\"]")
        return tuple(value)
    if get_origin(kind) is tuple:
        item = get_args(kind)[0]
        if not isinstance(value, list | tuple) or not value:
            raise HarnessError(f"{where} must be a non-empty array of tables ([[{where.removeprefix('config.')}]])",
                               "see docs/bench.md")
        return tuple(_table(f"{where}[{i}]", item, v) for i, v in enumerate(value))
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _table(where, kind, value)
    raise AssertionError(f"no rule for {kind}")  # a schema mistake, not the user's


def _table(where: str, cls: type[T], data: Any) -> T:
    if not isinstance(data, dict):
        raise HarnessError(f"{where} must be a table", "see docs/bench.md")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise HarnessError(f"unknown setting {where}.{unknown[0]}", f"known in {where}: {', '.join(sorted(names))}")
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kind = hints[f.name]
            if get_origin(kind) in (Union, types.UnionType):
                kind = next(a for a in get_args(kind) if a is not type(None))
            kwargs[f.name] = _value(f"{where}.{f.name}", kind, data[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise HarnessError(f"{where}.{f.name} is required", "see docs/bench.md")
    return cls(**kwargs)


def validate(cfg: BenchConfig) -> BenchConfig:
    s = cfg.sweep
    cfg.counts  # noqa: B018 - parses the list, raising on a malformed one
    checks = [
        (s.iterations >= 1, "sweep.iterations must be at least 1"),
        (s.duration > 0 and s.timeout > 0 and s.wait >= 0 and s.warmup >= 0 and s.margin >= 0,
         "sweep.duration and sweep.timeout must be positive; wait, warmup and margin not negative"),
        (s.retries >= 0, "sweep.retries must not be negative"),
        (s.rate >= 0, "sweep.rate must not be negative"),
        (0 <= s.until_ci < 1, "sweep.until_ci is a share of the mean between 0 and 1, e.g. 0.05"),
        (s.max_iterations >= s.iterations, "sweep.max_iterations must be at least sweep.iterations"),
        (s.interleave in ("point", "iteration"), "sweep.interleave must be point or iteration"),
        (cfg.samplers.interval > 0, "samplers.interval must be positive"),
        (cfg.server.mode in ("file", "return"), "server.mode must be file or return"),
        (cfg.server.filesize >= 0 and cfg.server.worker_connections >= 1 and cfg.server.workers >= 0,
         "server.filesize, workers and worker_connections must not be negative"),
        (cfg.server.url.startswith("http://"), "server.url must be an http:// URL"),
        (len({i.name for i in cfg.instance}) == len(cfg.instance), "instance names must be different"),
    ]
    for ok, message in checks:
        if not ok:
            raise HarnessError(message, "fix the configuration file")
    for c in cfg.client:
        if c.threads:
            conn_spec.check_threads(cfg.counts, c.threads * len(cfg.client))
    return cfg


def load(path: Path | None) -> BenchConfig:
    """The configuration in `path` (None: every default: nginx and wrk on this machine)."""
    if path is None:
        return validate(BenchConfig())
    data = tomlfile.read(path, HarnessError(f"no configuration file {path}", "pass the path of a TOML file"))
    return validate(_table("config", BenchConfig, data))


def from_json(data: dict[str, Any]) -> BenchConfig:
    """A configuration as a run's manifest stores it (for --resume)."""
    return _table("config", BenchConfig, data)
