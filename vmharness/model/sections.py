"""The experiment model: every table of a bench or run configuration file is a frozen dataclass whose
fields (name, type, default, bounds or checker) are the whole schema, read by `schema.table`; an unknown
key, a wrong type or a bad value is an error naming `table.key`. BenchConfig holds bench's tables and
RunConfig adds run's ([guest], [control], [study], [explain]). The checks on one value are
model/checks.py's, what a configuration implies (the control, pipeline twins) model/derived.py's, the
rules that span settings model/rules.py's, and reading a file or a manifest model/config.py's."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from vmharness.model import connections as conn_spec
from vmharness.model import libvirt_uri
from vmharness.model.bdf import parse_bdf
from vmharness.model.checks import (
    check_cpu_feature,
    check_cpu_features,
    check_iface,
    check_listen,
    check_name,
    check_path,
    check_program,
    check_qemu_arg,
    check_url,
)
from vmharness.model.cpubit import check_claim
from vmharness.model.emulator import check_emulator
from vmharness.model.hostboots import HostBootSection, check_boot_name
from vmharness.model.hostknobs import Knobs
from vmharness.model.hostname import check_host
from vmharness.model.kvm_modules import check_module_path, check_module_paths
from vmharness.model.qemu_args import check as check_qemu_args
from vmharness.model.schema import bounded, checked
from vmharness.model.switches import check_distinct, check_host_switch, check_switch
from vmharness.model.wire import check_address

DAY = 86400  # seconds: the longest any one wait, duration or timeout may be
MAX_FILESIZE = 1 << 30  # bytes: the file nginx serves is written to /tmp
Accel = Literal["auto", "kvm", "tcg"]
HugepageSize = Literal["2M", "1G"]
Init = Literal["systemd", "minimal"]
Interleave = Literal["auto", "point", "iteration"]
Search = Literal["grid", "adaptive"]
Variants = Literal["sweep", "peak"]
ServerMode = Literal["file", "return"]


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
    cpu_features: tuple[str, ...] = checked(check_cpu_feature, whole=check_cpu_features, default=())
    # `*-no` bits in cpu_features meant although the host lacks them (host/inspect/cpubits.py)
    claim_unmitigated: tuple[str, ...] = checked(check_claim, default=())
    # added to QEMU's command line, e.g. ["-global", "kvm-pit.lost_tick_policy=delay"]: pairs of the
    # options model/qemu_args.py allows
    qemu_args: tuple[str, ...] = checked(check_qemu_arg, whole=check_qemu_args, default=())
    # the share of one host CPU each vCPU may use, in percent (libvirt's <cputune> period and quota);
    # 0: no cap. What `run --control` uses to make a known cost.
    vcpu_cap: int = bounded(0, 0, 100)
    # the QEMU binary that runs its guest (libvirt's <emulator>; model/emulator.py); "": guest.qemu
    qemu: str = checked(check_emulator, default="")
    # KVM modules loaded in place of the stock ones while its guest runs (model/kvm_modules.py)
    kvm_modules: tuple[str, ...] = checked(check_module_path, whole=check_module_paths, default=())
    # HTTP/1.1 requests each wrk connection sends back to back: syscall-heavy load from few connections.
    # Compared as instances are (the same server, pipelined and not); no open-loop load (oha cannot).
    # sweep.pipeline makes the twins for every instance (with_pipelines)
    pipeline: int = bounded(1, 1, MAX_PIPELINE)
    host: Knobs = field(default_factory=Knobs)  # host knobs set while its guest runs (model/hostknobs.py)
    # the [[host_boot]] its guests run under (model/hostboots.py); "": the boot the run started in
    host_boot: str = checked(check_boot_name, default="")


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
    # sweep: every instance at every count; peak: the baseline alone sweeps, the others are measured at
    # its peak (the count where its first iteration peaked, fixed once: seed 001's method)
    variants: Variants = "sweep"
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
class StudySection:
    """An attribution study: from the first instance (every mitigation on), one instance per switch with
    that switch off, one with all of them off, and with one_on each switch alone (model/derived.py);
    and per host switch, the first instance in a host boot with that switch off (model/hoststudy.py)."""

    # model/switches.py's names, each once; none: no study
    switches: tuple[str, ...] = checked(check_switch, whole=check_distinct, default=())
    # the host kernel's switches: per-vulnerability ones and the host's attack vectors, each once
    host_switches: tuple[str, ...] = checked(check_host_switch, whole=check_distinct, default=())
    one_on: bool = False
    # with the adaptive search: the variants also at the reference's measured counts beside its peak
    neighbours: bool = False
    # the switch `qemu`: the QEMU binary of the variants with it off (the stock one); the reference runs its own
    qemu_off: str = checked(check_emulator, default="")


@dataclass(frozen=True)
class ExplainSection:
    """What a run measures to explain a cost, in extra points at the baseline's peak kept out of the
    statistics (bench/explained.py): `syscalls`, the server's system calls per request, one such point
    per instance and boot; `profile`, its CPUs sampled with call graphs by perf, one such point per
    instance; each `duration` seconds long."""

    syscalls: bool = False
    profile: bool = False
    duration: float = bounded(2.0, 0.5, 600.0)


@dataclass(frozen=True)
class ReportSection:
    """The report `vmharness run` writes into its folder at its end. `figures = false`: its text, tables
    and page without the drawings (matplotlib's figures, the flame graphs), which a slow machine spends
    minutes on (a rig's nested host under TCG: about 250 s of a report's 300); `vmharness report RUN
    --out DIR` draws them later from the same records."""

    figures: bool = True


@dataclass(frozen=True)
class GuestSection:
    """The guest that `vmharness run` boots for each instance and iteration."""

    memory: int = bounded(1024, 128, 1 << 22)  # MiB (at most 4 TiB)
    vcpus: int = bounded(0, 0, 1024)  # 0: 2, or fewer if the NIC's node has fewer CPUs
    # libvirt's, checked as model/libvirt_uri.py allows; qemu+ssh://HOST/system for a remote server
    uri: str = checked(libvirt_uri.check, default="qemu:///system")
    accel: Accel = "auto"  # auto (KVM if a probe guest runs under it), kvm or tcg
    # the QEMU binary of every instance that names none (libvirt's <emulator>); "": the one libvirt finds
    qemu: str = checked(check_emulator, default="")
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
    # seconds for a clean shutdown before the guest is destroyed; 0: powered off at once (its disk is an
    # overlay thrown away after, and nothing is read from it once its points are measured)
    shutdown_grace: float = bounded(0.0, 0, 3600)

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
    study: StudySection = field(default_factory=StudySection)
    explain: ExplainSection = field(default_factory=ExplainSection)
    report: ReportSection = field(default_factory=ReportSection)
    host_boot: tuple[HostBootSection, ...] = ()  # host kernels and command lines (model/hostboots.py)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if not self.host_boot:  # an empty array of tables is no table: it would not read back
            del out["host_boot"]
        return out

