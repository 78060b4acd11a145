"""The experiment model and its TOML form, validated in one place: every table is a frozen dataclass
whose fields (name, type, default, bounds or checker) are the whole schema, read by `schema.table`; an
unknown key, a wrong type or a bad value is an error naming `table.key`. Every value is checked as it
is read, because each one ends up somewhere that trusts it: names in paths and process tags, hosts on
ssh's command line, sizes in files written to /tmp, durations in waits. `validate` adds the rules that
span settings. The checkers are public so that command-line flags (`vm up --name`, `--out`) use the
same rules as the file."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from vmharness import data, digits
from vmharness.errors import HarnessError
from vmharness.model import connections as conn_spec
from vmharness.model import libvirt_uri, profile, schema, tomlfile
from vmharness.model.bdf import parse_bdf
from vmharness.model.cpubit import check_claim as check_claim
from vmharness.model.hostname import check_host as check_host
from vmharness.model.schema import bounded, checked
from vmharness.model.wire import DEFAULT_ADDRESS as DEFAULT_ADDRESS
from vmharness.model.wire import DEFAULT_CLIENT_ADDRESS as DEFAULT_CLIENT_ADDRESS
from vmharness.model.wire import check_address as check_address
from vmharness.model.wire import wire as wire

DAY = 86400  # seconds: the longest any one wait, duration or timeout may be
MAX_FILESIZE = 1 << 30  # bytes: the file nginx serves is written to /tmp
Accel = Literal["auto", "kvm", "tcg"]
HugepageSize = Literal["2M", "1G"]
Init = Literal["systemd", "minimal"]
Interleave = Literal["auto", "point", "iteration"]
Search = Literal["grid", "adaptive"]
ServerMode = Literal["file", "return"]

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,62}")
_IFACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@-]{0,14}")
CPU_FEATURE = re.compile(r"[+-][a-z0-9][a-z0-9_.-]*")


def check_name(value: str, where: str) -> str:
    """A name that becomes part of paths, domain names and process tags (instances, runs, guests):
    letters, digits, '.', '_' and '-', not starting with '-' or '.', at most 63 characters."""
    if not _NAME.fullmatch(value):
        raise HarnessError(f"{where} {value[:80]!r} is not a name: letters, digits, '.', '_' and '-', "
                           "not starting with '-' or '.', at most 63 characters", "e.g. baseline or pti-on")
    return value


def check_iface(value: str, where: str) -> str:
    """A network interface name as the kernel allows it (at most 15 characters, no '/')."""
    if not _IFACE.fullmatch(value) or value in (".", ".."):
        raise HarnessError(f"{where} {value[:80]!r} is not a network interface name", "e.g. eth0 or ens1f0")
    return value


def check_program(value: str, where: str) -> str:
    """A program run by name or path (nginx, wrk): never empty, never an option."""
    if not value or value.startswith("-"):
        raise HarnessError(f"{where} {value!r} is not a program", "a name on PATH or a path, e.g. /usr/sbin/nginx")
    return value


def check_path(value: str, where: str) -> str:
    """An optional path ("" for the default) that must not read as an option."""
    if value.startswith("-"):
        raise HarnessError(f"{where} {value[:80]!r} starts with '-'", f"write ./{value[:80]} for a relative path")
    return value


def check_url(value: str, where: str) -> str:
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme != "http" or not parts.hostname or not value.startswith("http://") \
            or any(c.isspace() for c in value) or port == 0:
        raise HarnessError(f"{where} {value[:80]!r} is not an http:// URL", "e.g. http://198.19.0.2:8080/")
    return value


def check_listen(value: str, where: str) -> str:
    """nginx's `listen` as the template writes it: PORT, ADDRESS:PORT or [IPv6]:PORT."""
    host, _, port = value.rpartition(":")
    ok = digits.is_digits(port) and len(port) <= 5 and 0 < int(port) < 65536
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            ok = False
    elif host and not re.fullmatch(r"[A-Za-z0-9._-]+", host):
        ok = False
    if not ok:
        raise HarnessError(f"{where} {value[:80]!r} is not ADDRESS:PORT", "e.g. 127.0.0.1:8080 or 8080")
    return value


def check_uri(value: str, where: str) -> str:
    """A libvirt URI vmharness may open: an allow-list of drivers, transports and parameters, its host
    checked as a client's (vmharness.model.libvirt_uri)."""
    return libvirt_uri.check(value, where)


def check_cpu_feature(value: str, where: str) -> str:
    if not CPU_FEATURE.fullmatch(value):
        raise HarnessError(f"{where} {value[:80]!r} is not +name or -name",
                           'write them as QEMU\'s -cpu does, e.g. ["-md-clear", "+pcid"]')
    return value


def check_qemu_arg(value: str, where: str) -> str:
    if not value:
        raise HarnessError(f"{where} is an empty argument", "drop it")
    return value


@dataclass(frozen=True)
class ServerSection:
    host: str = checked(check_host, default="local")  # "local" or an ssh name from ~/.ssh/config
    url: str = checked(check_url, default="http://127.0.0.1:8080/")  # what the clients request
    listen: str = checked(check_listen, default="127.0.0.1:8080")
    workers: int = bounded(0, 0, 4096)  # 0: one per CPU of the server
    worker_connections: int = bounded(1024, 1, 1_000_000)
    filesize: int = bounded(64, 0, MAX_FILESIZE)
    mode: ServerMode = "file"


MAX_PIPELINE = 1024  # requests a wrk connection sends back to back


@dataclass(frozen=True)
class InstanceSection:
    name: str = checked(check_name)
    nginx: str = checked(check_program, default="nginx")  # the server binary (an instrumented build, say)
    config: str = checked(check_path, default="")  # an nginx.conf used as it is instead of the template
    # A guest's (`vmharness run` only):
    cmdline: str = ""  # appended to the image's kernel command line
    kernel: str = checked(check_path, default="")  # a bzImage to boot instead of the image's kernel
    initrd: str = checked(check_path, default="")  # with kernel: its initramfs
    # an image folder (`image build --kernel linux-image-....deb`); default: the recipe's
    image: str = checked(check_path, default="")
    # the guest's tuning profile (sysctls and all) for this instance; default: tuning.profile
    profile: str = checked(check_path, default="")
    # the vCPU's, QEMU style: "-md-clear" hides one, "+pcid" requires one
    cpu_features: tuple[str, ...] = checked(check_cpu_feature, default=())
    claim_unmitigated: tuple[str, ...] = checked(check_claim, default=())
    # added to QEMU's command line, e.g. ["-global", "kvm-pit.lost_tick_policy=delay"]
    qemu_args: tuple[str, ...] = checked(check_qemu_arg, default=())
    # the share of one host CPU each vCPU may use, in percent (libvirt's <cputune> period and quota);
    # 0: no cap. What `run --control` uses to make a known cost.
    vcpu_cap: int = bounded(0, 0, 100)
    # HTTP/1.1 requests each wrk connection sends back to back: syscall-heavy load from few connections.
    # Compared as instances are (the same server, pipelined and not); no open-loop load (oha cannot).
    # sweep.pipeline makes the twins for every instance (with_pipelines)
    pipeline: int = bounded(1, 1, MAX_PIPELINE)


@dataclass(frozen=True)
class ClientSection:
    host: str = checked(check_host, default="local")
    threads: int = bounded(0, 0, conn_spec.MAX_THREADS)  # 0: min(connections, the client's CPUs)
    wrk: str = checked(check_program, default="wrk")
    oha: str = checked(check_program, default="oha")  # the open-loop generator ([load])


@dataclass(frozen=True)
class SweepSection:
    connections: str = "16:256:16,256:1024:128,1024:1536:256"
    iterations: int = bounded(3, 1, 1000)
    duration: int = bounded(30, 1, DAY)  # seconds; wrk takes whole seconds
    wait: float = bounded(1.0, 0, DAY)
    warmup: int = bounded(5, 0, DAY)
    timeout: int = bounded(10, 1, DAY)  # wrk --timeout, well above the expected tail
    retries: int = bounded(2, 0, 100)
    margin: float = bounded(15.0, 0, DAY)  # a wrk still running duration + timeout + margin after its start is hung
    restart_server_between_runs: bool = False
    interleave: Interleave = "auto"  # point: every instance at each point; iteration: a whole sweep each;
    # auto: point for bench, iteration for run (a guest boots once per instance and iteration)
    # > 0: more iterations until each point's 95% interval is within ± this share of the mean
    until_ci: float = bounded(0.0, 0, 0.99)
    max_iterations: int = bounded(10, 1, 1000)  # ... but never more than this many
    # grid: every count of `connections`; adaptive: a ladder from its smallest count to its largest,
    # refined around the baseline's peak, then iterations at the peak only (docs/run.md)
    search: Search = "grid"
    search_factor: float = bounded(2.0, 1.1, 16.0)  # adaptive: each ladder step multiplies by this
    search_resolution: float = bounded(0.15, 0.01, 1.0)  # adaptive: the peak is located to within this share
    # HTTP/1.1 pipelining depths every instance is measured at: the instance itself at the first, a twin
    # NAME-pD at each other (with_pipelines); in run a twin rides on its instance's boots
    pipeline: tuple[int, ...] = bounded((1,), 1, MAX_PIPELINE)


@dataclass(frozen=True)
class LoadSection:
    """Latency against load (docs/load.md): once the sweep has found the baseline's peak, each instance
    (not the positive control) at fixed request rates, these percentages of that peak, from oha on the
    clients; and before the sweep, what each client can generate."""

    percents: tuple[int, ...] = bounded((25, 50, 75, 90), 1, 100)  # []: no open-loop load
    duration: int = bounded(0, 0, DAY)  # seconds per point; 0: sweep.duration
    capacity: int = bounded(2, 0, 600)  # seconds each client measures itself for; 0: not measured


@dataclass(frozen=True)
class SamplerSection:
    interval: float = bounded(1.0, 0.01, 3600)


@dataclass(frozen=True)
class TuningSection:
    profile: str = checked(check_path, default="none")  # none, seeds or a profile TOML file (docs/tuning.md)
    # the NICs to tune on the server; default: those backed by a device
    server_iface: tuple[str, ...] = checked(check_iface, default=())
    client_iface: tuple[str, ...] = checked(check_iface, default=())


CONTROL_CAP = 50  # `run --control`: a cost of about -48% at saturation (the vCPU ran ~87% under TCG here),
# the size of the effects the demo looks for; -12% at a cap of 80 was within its noise


@dataclass(frozen=True)
class ControlSection:
    """A positive control (`run --control`): one more instance, the baseline with its vCPUs capped to
    `cap` percent of a CPU, whose cost at saturation is known before the run: about cap/100 - 1."""

    cap: int = bounded(0, 0, 99)  # 0: no control
    name: str = checked(check_name, default="control")


@dataclass(frozen=True)
class GuestSection:
    """The guest that `vmharness run` boots for each instance and iteration."""

    memory: int = bounded(1024, 128, 1 << 22)  # MiB (at most 4 TiB)
    vcpus: int = bounded(0, 0, 1024)  # 0: 2, or fewer if the NIC's node has fewer CPUs
    uri: str = checked(check_uri, default="qemu:///system")  # libvirt; qemu+ssh://HOST/system for a remote server
    accel: Accel = "auto"  # auto (KVM if a probe guest runs under it), kvm or tcg
    image: str = checked(check_path, default="")  # an image folder; default: the recipe's in images/ (built if missing)
    # minimal: the image's vmh-init (mounts, drivers, agent, sshd; a TCG boot in half the time, nothing in
    # the background), or systemd: the image's full boot
    init: Init = "minimal"
    # NICs passed through (also --bdf); none: wrk reaches the guest over its link
    bdf: tuple[str, ...] = checked(parse_bdf, default=())
    managed: bool = False  # let libvirt bind them to vfio-pci (default: run or host-prepare does)
    # with a NIC passed through: the guest's address on it (CIDR), where wrk connects (also --address);
    # "": DEFAULT_ADDRESS, or the first free host of client_address's network
    address: str = checked(check_address, default="")
    # the clients' address on the same wire (CIDR; also --client-address): a client machine must hold it;
    # "": DEFAULT_CLIENT_ADDRESS, or the first free host of address's network
    client_address: str = checked(check_address, default="")
    port: int = bounded(8080, 1, 65535)
    hugepages: bool = False  # guest memory on hugepages of the NIC's node (also --hugepages)
    hugepage_size: HugepageSize = "2M"
    boot_timeout: float = bounded(300.0, 1, DAY)
    shutdown_grace: float = bounded(60.0, 0, 3600)

    def __post_init__(self) -> None:
        # a device named twice (two spellings of one address, or a repeat) is one device, one hostdev
        object.__setattr__(self, "bdf", tuple(dict.fromkeys(parse_bdf(b, "guest.bdf") for b in self.bdf)))


@dataclass(frozen=True)
class BenchConfig:
    server: ServerSection = field(default_factory=ServerSection)
    instance: tuple[InstanceSection, ...] = (InstanceSection("baseline"),)
    client: tuple[ClientSection, ...] = (ClientSection(),)
    sweep: SweepSection = field(default_factory=SweepSection)
    load: LoadSection = field(default_factory=LoadSection)
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
    control: ControlSection = field(default_factory=ControlSection)


def with_control(cfg: RunConfig, where: str = "control.cap") -> RunConfig:
    """`cfg` with its control instance (the first instance, vCPUs capped) appended, if it has a control
    and lacks it; a configuration that already holds it (a resumed run's) is returned as it is.
    `where`: the flag or key the cap came from, for errors."""
    c = cfg.control
    if not c.cap:
        return cfg
    base = cfg.instance[0]
    if base.vcpu_cap:
        raise HarnessError(f"{where}: the baseline {base.name} already caps its vCPUs (vcpu_cap = {base.vcpu_cap})",
                           "a control is the uncapped baseline made slower: drop vcpu_cap from the first instance")
    want = dataclasses.replace(base, name=c.name, vcpu_cap=c.cap)
    have = next((i for i in cfg.instance if i.name == c.name), None)
    if have is None:
        return dataclasses.replace(cfg, instance=(*cfg.instance, want))
    if have != want:
        raise HarnessError(f"{where}: an instance is already named {c.name!r}",
                           "rename that instance, or give the control another name (control.name)")
    return cfg


C = TypeVar("C", bound=BenchConfig)  # validate() returns what it is given


def twin_name(name: str, depth: int) -> str:
    return f"{name}-p{depth}"


def with_pipelines(cfg: C) -> C:
    """`cfg` with every instance at every depth of sweep.pipeline: the instance itself at the first, a
    twin NAME-pD (the instance, D requests per connection) at each other, appended in that order. A
    configuration that already holds them (a resumed run's) is returned as it is. The positive
    control is not twinned: its cost is known at the baseline's depth only."""
    depths = cfg.sweep.pipeline
    if depths == (1,):
        return cfg
    if not depths:
        raise HarnessError("sweep.pipeline is empty", "list the depths to measure at: [1] (the default), [1, 16]")
    if len(set(depths)) != len(depths):
        raise HarnessError(f"sweep.pipeline: {list(depths)} names a depth twice", "list each depth once: [1, 16]")
    control = cfg.control.name if isinstance(cfg, RunConfig) and cfg.control.cap else None
    names = {i.name for i in cfg.instance}
    originals = [i for i in cfg.instance if i.name == control or not any(
        i.name == twin_name(o.name, d) for o in cfg.instance for d in depths[1:] if o.name != i.name)]
    for i in originals:
        if i.pipeline not in (1, depths[0]) and i.name != control:
            raise HarnessError(f"instance {i.name}: pipeline = {i.pipeline}, and sweep.pipeline gives every "
                               "instance its depths", "set one: the instance's pipeline or sweep.pipeline")
    first = [i if i.name == control else dataclasses.replace(i, pipeline=depths[0]) for i in originals]
    twins = [dataclasses.replace(i, name=twin_name(i.name, d), pipeline=d)
             for d in depths[1:] for i in originals if i.name != control]
    want = (*first, *twins)
    if set(cfg.instance) == set(want):
        return cfg
    if taken := sorted(names & {t.name for t in twins}):
        raise HarnessError(f"sweep.pipeline: an instance is already named {taken[0]!r}",
                           "rename it: sweep.pipeline names the twin at each depth NAME-pDEPTH")
    return dataclasses.replace(cfg, instance=want)


def interleave(cfg: BenchConfig) -> str:
    if cfg.sweep.interleave != "auto":
        return cfg.sweep.interleave
    return "iteration" if isinstance(cfg, RunConfig) else "point"


def validate(cfg: C) -> C:
    """The rules that span settings (each setting alone was checked when it was read)."""
    s = cfg.sweep
    cfg.counts  # noqa: B018 - parses the list, raising on a malformed one
    checks = [
        (s.max_iterations >= s.iterations, "sweep.max_iterations must be at least sweep.iterations"),
        (len({i.name for i in cfg.instance}) == len(cfg.instance), "instance names must be different"),
        (len(set(cfg.load.percents)) == len(cfg.load.percents), "load.percents must be different"),
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
            for key in ("cmdline", "kernel", "initrd", "image", "profile", "cpu_features", "claim_unmitigated",
                        "qemu_args", "vcpu_cap"):
                if getattr(i, key):
                    raise HarnessError(f"instance {i.name}: {key} is a guest's setting; bench runs on bare metal",
                                       "boot guests with: vmharness run CONFIG")
    return cfg


def _file(where: str, path: str, folder: bool = False) -> None:
    try:
        found = Path(path).is_dir() if folder else Path(path).is_file()
    except (OSError, ValueError):  # a name too long for the system, say
        found = False
    if path and not found:
        raise HarnessError(f"{where}: no such {'folder' if folder else 'file'} {path[:200]}", "fix the path in the "
                           "configuration (relative paths are from the directory vmharness runs in)")


def _validate_run(cfg: RunConfig) -> None:
    g, server = cfg.guest, ServerSection()
    for key in ("host", "url", "listen"):
        if getattr(cfg.server, key) != getattr(server, key):
            raise HarnessError(f"server.{key} is chosen by run: nginx runs in the guest, at the guest's address",
                               "drop it; set guest.port, and guest.address with a passed-through NIC")
    wire(g.address, g.client_address, ("guest.address", "guest.client_address"))
    checks = [
        (not (len(cfg.instance) > 1 and cfg.sweep.interleave == "point"),
         "sweep.interleave = point cannot be: a guest boots one instance at a time (use iteration)"),
    ]
    for ok, message in checks:
        if not ok:
            raise HarnessError(message, "fix the configuration file (docs/run.md lists every setting)")
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


DEFAULT_RUN = data.DEFAULT_RUN


def _read(path: Path) -> dict[str, Any]:
    return tomlfile.read(path, HarnessError(f"no configuration file {path}", "pass the path of a TOML file"))


def load(path: Path | None) -> BenchConfig:
    """bench's configuration in `path` (None: every default: nginx and wrk on this machine)."""
    return validate(with_pipelines(schema.table("config", BenchConfig, _read(path)) if path else BenchConfig()))


def load_run(path: Path | None) -> RunConfig:
    """run's configuration in `path` (None: the embedded experiment, default-run.toml)."""
    return validate(with_control(with_pipelines(schema.table("config", RunConfig, _read(path or DEFAULT_RUN)))))


def from_json(data: dict[str, Any]) -> BenchConfig:
    """A bench configuration as its manifest stores it (for --resume)."""
    return with_pipelines(schema.table("config", BenchConfig, data))


def run_from_json(data: dict[str, Any]) -> RunConfig:
    return with_control(with_pipelines(schema.table("config", RunConfig, data)))
