"""The experiment model and its TOML form, validated in one place: every table is a frozen dataclass
whose fields (name, type, default) are the whole schema; an unknown key, a wrong type or a bad value
is an error naming `table.key`."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from vmharness import tomlfile
from vmharness.bench import connections as conn_spec
from vmharness.errors import HarnessError
from vmharness.tune import profile


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
    # A guest's (`vmharness run` only):
    cmdline: str = ""  # appended to the image's kernel command line
    kernel: str = ""  # a bzImage to boot instead of the image's kernel
    initrd: str = ""  # with kernel: its initramfs
    image: str = ""  # an image folder (`image build --kernel linux-image-....deb`); default: the recipe's
    profile: str = ""  # the guest's tuning profile (sysctls and all) for this instance; default: tuning.profile
    cpu_features: tuple[str, ...] = ()  # the vCPU's, QEMU style: "-md-clear" hides one, "+pcid" requires one
    qemu_args: tuple[str, ...] = ()  # added to QEMU's command line, e.g. ["-global", "kvm-pit.lost_tick_policy=delay"]


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
    interleave: str = "auto"  # point: every instance at each point; iteration: a whole sweep each;
    # auto: point for bench, iteration for run (a guest boots once per instance and iteration)
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
class GuestSection:
    """The guest that `vmharness run` boots for each instance and iteration."""

    memory: int = 1024  # MiB
    vcpus: int = 0  # 0: 2, or fewer if the NIC's node has fewer CPUs
    uri: str = "qemu:///system"  # libvirt; qemu+ssh://HOST/system for a remote server machine
    accel: str = "auto"  # auto (KVM if a probe guest runs under it), kvm or tcg
    image: str = ""  # an image folder; default: the recipe's in images/ (built if missing)
    init: str = "systemd"  # systemd, or minimal: the image's vmh-init (mounts, network, agent, sshd)
    bdf: tuple[str, ...] = ()  # NICs passed through (also --bdf); none: wrk reaches the guest over its link
    managed: bool = False  # let libvirt bind them to vfio-pci (default: run or host-prepare does)
    address: str = ""  # with bdf: the guest's address on the passed-through NIC (CIDR), where wrk connects
    port: int = 8080
    hugepages: bool = False  # guest memory on hugepages of the NIC's node (also --hugepages)
    hugepage_size: str = "2M"
    boot_timeout: float = 300.0
    shutdown_grace: float = 60.0


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


@dataclass(frozen=True)
class RunConfig(BenchConfig):
    """`vmharness run`: the server is nginx in a guest; [server] sets nginx, [guest] the guest."""

    tuning: TuningSection = field(default_factory=lambda: TuningSection(profile="seeds"))
    guest: GuestSection = field(default_factory=GuestSection)


T = TypeVar("T")
C = TypeVar("C", bound=BenchConfig)  # validate() returns what it is given


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


def interleave(cfg: BenchConfig) -> str:
    if cfg.sweep.interleave != "auto":
        return cfg.sweep.interleave
    return "iteration" if isinstance(cfg, RunConfig) else "point"


def validate(cfg: C) -> C:
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
        (s.interleave in ("auto", "point", "iteration"), "sweep.interleave must be auto, point or iteration"),
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
    profile.load(cfg.tuning.profile)  # a bad profile is said now, not after the image and the host are ready
    if isinstance(cfg, RunConfig):
        _validate_run(cfg)
    else:
        for i in cfg.instance:
            for key in ("cmdline", "kernel", "initrd", "image", "profile", "cpu_features", "qemu_args"):
                if getattr(i, key):
                    raise HarnessError(f"instance {i.name}: {key} is a guest's setting; bench runs on bare metal",
                                       "boot guests with: vmharness run CONFIG")
    return cfg


def _file(where: str, path: str, folder: bool = False) -> None:
    if path and not (Path(path).is_dir() if folder else Path(path).is_file()):
        raise HarnessError(f"{where}: no such {'folder' if folder else 'file'} {path}", "fix the path in the "
                           "configuration (relative paths are from the directory vmharness runs in)")


def _validate_run(cfg: RunConfig) -> None:
    from vmharness.host.pci import parse_bdf

    g, server = cfg.guest, ServerSection()
    for key in ("host", "url", "listen"):
        if getattr(cfg.server, key) != getattr(server, key):
            raise HarnessError(f"server.{key} is chosen by run: nginx runs in the guest, at the guest's address",
                               "drop it; set guest.port, and guest.address with a passed-through NIC")
    checks = [
        (g.memory >= 128, "guest.memory is in MiB and must be at least 128"),
        (g.vcpus >= 0, "guest.vcpus must not be negative (0: automatic)"),
        (g.accel in ("auto", "kvm", "tcg"), "guest.accel must be auto, kvm or tcg"),
        (g.init in ("systemd", "minimal"), "guest.init must be systemd or minimal"),
        (g.hugepage_size in ("2M", "1G"), "guest.hugepage_size must be 2M or 1G"),
        (0 < g.port < 65536, "guest.port must be a TCP port"),
        (g.boot_timeout > 0 and g.shutdown_grace >= 0, "guest.boot_timeout must be positive"),
        (not g.bdf or bool(g.address), "guest.address is needed with guest.bdf: the address wrk connects to "
                                       "on the passed-through NIC, e.g. \"198.19.0.2/24\""),
        (not (len(cfg.instance) > 1 and cfg.sweep.interleave == "point"),
         "sweep.interleave = point cannot be: a guest boots one instance at a time (use iteration)"),
    ]
    for ok, message in checks:
        if not ok:
            raise HarnessError(message, "fix the configuration file (docs/run.md lists every setting)")
    for bdf in g.bdf:
        parse_bdf(bdf)
    if g.address:
        try:
            ipaddress.IPv4Interface(g.address)
        except ValueError as exc:
            raise HarnessError(f"guest.address {g.address!r} is not an IPv4 address with a prefix length",
                               "write it like 198.19.0.2/24") from exc
    _file("guest.image", g.image, folder=True)
    for i in cfg.instance:
        _file(f"instance {i.name}: kernel", i.kernel)
        _file(f"instance {i.name}: initrd", i.initrd)
        _file(f"instance {i.name}: config", i.config)
        _file(f"instance {i.name}: image", i.image, folder=True)
        if i.initrd and not i.kernel:
            raise HarnessError(f"instance {i.name}: initrd needs kernel", "name the kernel the initrd was made for")
        if i.profile:
            profile.load(i.profile)
        for feature in i.cpu_features:
            if not CPU_FEATURE.fullmatch(feature):
                raise HarnessError(f"instance {i.name}: cpu_features entry {feature!r} is not +name or -name",
                                   'write them as QEMU\'s -cpu does, e.g. ["-md-clear", "+pcid"]')
        if "" in i.qemu_args:
            raise HarnessError(f"instance {i.name}: qemu_args has an empty argument", "drop it")


CPU_FEATURE = re.compile(r"[+-][a-z0-9][a-z0-9_.-]*")
DEFAULT_RUN = Path(__file__).resolve().parent / "default-run.toml"


def _read(path: Path) -> dict[str, Any]:
    return tomlfile.read(path, HarnessError(f"no configuration file {path}", "pass the path of a TOML file"))


def load(path: Path | None) -> BenchConfig:
    """bench's configuration in `path` (None: every default: nginx and wrk on this machine)."""
    return validate(_table("config", BenchConfig, _read(path)) if path else BenchConfig())


def load_run(path: Path | None) -> RunConfig:
    """run's configuration in `path` (None: the embedded experiment, default-run.toml)."""
    return validate(_table("config", RunConfig, _read(path or DEFAULT_RUN)))


def from_json(data: dict[str, Any]) -> BenchConfig:
    """A bench configuration as its manifest stores it (for --resume)."""
    return _table("config", BenchConfig, data)


def run_from_json(data: dict[str, Any]) -> RunConfig:
    return _table("config", RunConfig, data)
