"""Hostile values for every setting and flag the configuration and host-prepare read: each is refused
where it is read, in one `error:` line naming the key or flag and one `hint:` line, never a traceback
and never accepted. Valid values at the edges are accepted, so a check cannot be too wide either."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from tests.unit.test_cli_errors import assert_one_line_error
from vmharness.errors import HarnessError
from vmharness.model import config, profile

MLX, CX5 = 0x15B3, 0x1017


def _refused(load: object, path: Path, text: str, *needles: str) -> None:
    path.write_text(text)
    with pytest.raises(HarnessError) as err:
        load(path)  # type: ignore[operator]
    lines = err.value.render().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), lines
    for n in needles:
        assert n in lines[0], (n, lines[0])


NAME = '[[instance]]\nname = "{}"\n'
BENCH_CASES = {
    # names: one strict pattern
    "name-empty": (NAME.format(""), "instance[0].name"),
    "name-shell": (NAME.format("a b;$(touch /tmp/x)"), "instance[0].name"),
    "name-path": (NAME.format("../x"), "instance[0].name"),
    "name-slash": (NAME.format("a/b"), "instance[0].name"),
    "name-dash": (NAME.format("-x"), "instance[0].name"),
    "name-dot": (NAME.format(".x"), "instance[0].name"),
    "name-64": (NAME.format("a" * 64), "instance[0].name"),
    "name-unicode": (NAME.format("bäse"), "instance[0].name"),
    "name-newline": (NAME.format("a\\nb"), "instance[0].name"),
    "name-not-a-string": ("[[instance]]\nname = 3\n", "instance[0].name"),
    # the client
    "threads-negative": ("[[client]]\nthreads = -4\n", "client[0].threads"),
    "threads-huge": ("[[client]]\nthreads = 100000\n", "client[0].threads"),
    "client-host-option": ('[[client]]\nhost = "-oProxyCommand=touch /tmp/x"\n', "client[0].host"),
    "client-host-space": ('[[client]]\nhost = "a b"\n', "client[0].host"),
    "wrk-option": ('[[client]]\nwrk = "-x"\n', "client[0].wrk"),
    "pipeline-zero": ('[[instance]]\nname = "a"\npipeline = 0\n', "instance[0].pipeline"),
    "pipeline-huge": ('[[instance]]\nname = "a"\npipeline = 1025\n', "instance[0].pipeline"),
    "pipeline-float": ('[[instance]]\nname = "a"\npipeline = 2.5\n', "instance[0].pipeline"),
    "sweep-pipeline-zero": ('[sweep]\npipeline = [1, 0]\n', "sweep.pipeline"),
    "sweep-pipeline-huge": ('[sweep]\npipeline = [1, 5000]\n', "sweep.pipeline"),
    "sweep-pipeline-string": ('[sweep]\npipeline = ["16; reboot"]\n', "sweep.pipeline"),
    "sweep-pipeline-twice": ('[sweep]\npipeline = [16, 16]\n', "sweep.pipeline"),
    "sweep-pipeline-empty": ('[sweep]\npipeline = []\n', "sweep.pipeline"),
    "sweep-pipeline-taken": ('[[instance]]\nname = "a"\n[[instance]]\nname = "a-p8"\nnginx = "nginx2"\n'
                             '[sweep]\npipeline = [1, 8]\n', "sweep.pipeline"),
    "oha-option": ('[[client]]\noha = "-x"\n', "client[0].oha"),
    "oha-empty": ('[[client]]\noha = ""\n', "client[0].oha"),
    # the sweep
    "connections-zero": ('[sweep]\nconnections = "0"\n', "sweep.connections"),
    "connections-huge-range": ('[sweep]\nconnections = "1:1000000:1"\n', "sweep.connections", "1000"),
    "connections-beyond": ('[sweep]\nconnections = "2000000"\n', "sweep.connections"),
    "connections-step-zero": ('[sweep]\nconnections = "16:256:0"\n', "sweep.connections"),
    "connections-reversed": ('[sweep]\nconnections = "256:16:16"\n', "sweep.connections"),
    "connections-negative": ('[sweep]\nconnections = "-16:256:16"\n', "sweep.connections"),
    "connections-two-fields": ('[sweep]\nconnections = "1:2"\n', "sweep.connections"),
    "connections-underscore": ('[sweep]\nconnections = "1_000"\n', "sweep.connections"),
    "connections-word": ('[sweep]\nconnections = "many"\n', "sweep.connections"),
    "connections-empty": ('[sweep]\nconnections = ""\n', "sweep.connections"),
    "iterations-zero": ("[sweep]\niterations = 0\n", "sweep.iterations"),
    "duration-zero": ("[sweep]\nduration = 0\n", "sweep.duration"),
    "duration-a-year": ("[sweep]\nduration = 31536000\n", "sweep.duration"),
    "duration-float": ("[sweep]\nduration = 1.5\n", "sweep.duration"),
    "timeout-zero": ("[sweep]\ntimeout = 0\n", "sweep.timeout"),
    "warmup-negative": ("[sweep]\nwarmup = -1\n", "sweep.warmup"),
    "wait-inf": ("[sweep]\nwait = inf\n", "sweep.wait"),
    "wait-nan": ("[sweep]\nwait = nan\n", "sweep.wait"),
    "wait-negative": ("[sweep]\nwait = -1.0\n", "sweep.wait"),
    "margin-nan": ("[sweep]\nmargin = nan\n", "sweep.margin"),
    "margin-minus-inf": ("[sweep]\nmargin = -inf\n", "sweep.margin"),
    "retries-negative": ("[sweep]\nretries = -1\n", "sweep.retries"),
    "rate-gone": ("[sweep]\nrate = 1000\n", "sweep.rate"),
    "load-percents-zero": ("[load]\npercents = [0, 50]\n", "load.percents[0]"),
    "load-percents-over": ("[load]\npercents = [50, 101]\n", "load.percents[1]"),
    "load-percents-float": ("[load]\npercents = [50.5]\n", "load.percents"),
    "load-percents-text": ('[load]\npercents = "50"\n', "load.percents"),
    "load-percents-bool": ("[load]\npercents = [true]\n", "load.percents"),
    "load-percents-twice": ("[load]\npercents = [50, 50]\n", "load.percents"),
    "load-duration-negative": ("[load]\nduration = -1\n", "load.duration"),
    "load-capacity-hour": ("[load]\ncapacity = 3600\n", "load.capacity"),
    "load-unknown-key": ("[load]\nrates = [1000]\n", "load.rates"),
    "until-ci-nan": ("[sweep]\nuntil_ci = nan\n", "sweep.until_ci"),
    "until-ci-whole": ("[sweep]\nuntil_ci = 1.5\n", "sweep.until_ci"),
    "max-iterations-huge": ("[sweep]\nmax_iterations = 1000000\n", "sweep.max_iterations"),
    "interleave-unknown": ('[sweep]\ninterleave = "random"\n', "sweep.interleave"),
    "search-unknown": ('[sweep]\nsearch = "bisect"\n', "sweep.search"),
    "variants-unknown": ('[sweep]\nvariants = "some"\n', "sweep.variants"),
    "variants-number": ("[sweep]\nvariants = 1\n", "sweep.variants"),
    "search-factor-one": ("[sweep]\nsearch_factor = 1.0\n", "sweep.search_factor"),
    "search-factor-nan": ("[sweep]\nsearch_factor = nan\n", "sweep.search_factor"),
    "search-resolution-zero": ("[sweep]\nsearch_resolution = 0\n", "sweep.search_resolution"),
    "interval-zero": ("[samplers]\ninterval = 0\n", "samplers.interval"),
    "interval-inf": ("[samplers]\ninterval = inf\n", "samplers.interval"),
    # the server
    "filesize-100-gb": ("[server]\nfilesize = 100000000000\n", "server.filesize"),
    "filesize-negative": ("[server]\nfilesize = -1\n", "server.filesize"),
    "workers-negative": ("[server]\nworkers = -1\n", "server.workers"),
    "worker-connections-zero": ("[server]\nworker_connections = 0\n", "server.worker_connections"),
    "worker-connections-huge": ("[server]\nworker_connections = 100000000\n", "server.worker_connections"),
    "server-host-option": ('[server]\nhost = "-oProxyCommand=x"\n', "server.host"),
    "server-url-ftp": ('[server]\nurl = "ftp://127.0.0.1/"\n', "server.url"),
    "server-url-space": ('[server]\nurl = "http://a b/"\n', "server.url"),
    "server-url-port": ('[server]\nurl = "http://127.0.0.1:99999/"\n', "server.url"),
    "server-listen-injection": ('[server]\nlisten = "8080; include /etc/shadow"\n', "server.listen"),
    "server-listen-port": ('[server]\nlisten = "127.0.0.1:0"\n', "server.listen"),
    "server-mode": ('[server]\nmode = "ftp"\n', "server.mode must be file or return"),
    "nginx-empty": ('[[instance]]\nname = "a"\nnginx = ""\n', "instance[0].nginx"),
    "nginx-option": ('[[instance]]\nname = "a"\nnginx = "--help"\n', "instance[0].nginx"),
    "nul-in-a-string": ('[[instance]]\nname = "a"\nnginx = "ngi\\u0000nx"\n', "instance[0].nginx", "control"),
    "string-too-long": (f'[[instance]]\nname = "a"\nnginx = "{"x" * 5000}"\n', "instance[0].nginx"),
    # tuning
    "iface-path": ('[tuning]\nserver_iface = ["../../etc"]\n', "tuning.server_iface[0]"),
    "iface-long": ('[tuning]\nclient_iface = ["abcdefghijklmnop"]\n', "tuning.client_iface[0]"),
    "profile-option": ('[tuning]\nprofile = "-x"\n', "tuning.profile"),
    "profile-a-folder": ('[tuning]\nprofile = "/"\n', "no profile '/'"),
    "profile-name-too-long": (f'[tuning]\nprofile = "{"p" * 3000}"\n', "no profile"),
    # tables
    "unknown-key": ("[sweep]\nspeed = 1\n", "config.sweep.speed"),
    "unknown-odd-key": ('[sweep]\n"a\\nb" = 1\n', "config.sweep"),
    "instance-not-tables": ("instance = [1]\n", "instance[0]"),
    "instance-empty": ("instance = []\n", "config.instance"),
    "client-a-string": ('client = "x"\n', "config.client"),
}

GUEST = "[guest]\n"
RUN_CASES = {
    "memory-tiny": (GUEST + "memory = 10\n", "guest.memory"),
    "memory-huge": (GUEST + "memory = 1000000000\n", "guest.memory"),
    "vcpus-negative": (GUEST + "vcpus = -1\n", "guest.vcpus"),
    "vcpus-huge": (GUEST + "vcpus = 100000\n", "guest.vcpus"),
    "boot-timeout-inf": (GUEST + "boot_timeout = inf\n", "guest.boot_timeout"),
    "boot-timeout-zero": (GUEST + "boot_timeout = 0\n", "guest.boot_timeout"),
    "shutdown-grace-nan": (GUEST + "shutdown_grace = nan\n", "guest.shutdown_grace"),
    "port-zero": (GUEST + "port = 0\n", "guest.port"),
    "port-beyond": (GUEST + "port = 70000\n", "guest.port"),
    "accel-unknown": (GUEST + 'accel = "xen"\n', "guest.accel must be auto, kvm or tcg"),
    "hugepage-size-unknown": (GUEST + 'hugepage_size = "4K"\n', "guest.hugepage_size must be 2M or 1G"),
    "init-unknown": (GUEST + 'init = "openrc"\n', "guest.init"),
    "uri-ssh-option": (GUEST + 'uri = "qemu+ssh://-oProxyCommand=x/system"\n', "guest.uri"),
    "uri-no-scheme": (GUEST + 'uri = "/system"\n', "guest.uri"),
    "address-without-prefix": (GUEST + 'address = "198.19.0.2"\n', "guest.address"),
    "address-the-network": (GUEST + 'address = "198.19.0.0/24"\n', "guest.address"),
    "address-a-name": (GUEST + 'address = "guest/24"\n', "guest.address"),
    "address-ipv6": (GUEST + 'address = "fd00::2/64"\n', "guest.address"),
    "bdf-empty": (GUEST + 'bdf = [""]\naddress = "198.19.0.2/24"\n', "guest.bdf[0]"),
    "bdf-path": (GUEST + 'bdf = ["../../etc"]\naddress = "198.19.0.2/24"\n', "guest.bdf[0]"),
    "bdf-trailing-newline": (GUEST + 'bdf = ["b3:00.0\\n"]\naddress = "198.19.0.2/24"\n', "guest.bdf[0]"),
    "image-option": (GUEST + 'image = "-x"\n', "guest.image"),
    "kernel-option": ('[[instance]]\nname = "a"\nkernel = "-x"\n', "instance[0].kernel"),
    "cpu-feature-space": ('[[instance]]\nname = "a"\ncpu_features = ["+a b"]\n', "cpu_features[0]"),
    "run-name-path": (NAME.format("../x"), "instance[0].name"),
}


@pytest.mark.parametrize(("text", "needles"), [(t, n) for t, *n in BENCH_CASES.values()], ids=list(BENCH_CASES))
def test_a_hostile_bench_setting_is_refused_naming_it(tmp_path: Path, text: str, needles: list[str]) -> None:
    _refused(config.load, tmp_path / "c.toml", text, *needles)


@pytest.mark.parametrize(("text", "needles"), [(t, n) for t, *n in RUN_CASES.values()], ids=list(RUN_CASES))
def test_a_hostile_run_setting_is_refused_naming_it(tmp_path: Path, text: str, needles: list[str]) -> None:
    _refused(config.load_run, tmp_path / "r.toml", text, *needles)


@pytest.mark.parametrize("text", [
    NAME.format("a" * 63) + NAME.format("pti-on") + NAME.format("v1.2_x") + NAME.format("9"),
    '[sweep]\nconnections = "1:1000:1"\nwait = 0\nuntil_ci = 0.05\nmax_iterations = 20\n',
    "[server]\nfilesize = 1073741824\nworker_connections = 1000000\n",
    '[[client]]\nhost = "user@server-1.example"\nthreads = 1\n[sweep]\nconnections = "1:64:1"\n',
    '[server]\nlisten = "[::1]:8080"\nurl = "http://[::1]:8080/x"\n',
    '[tuning]\nserver_iface = ["ens1f0", "eth0.100"]\n',
], ids=["names-at-the-edges", "a-1000-point-sweep", "the-largest-file", "an-ssh-client", "ipv6", "ifaces"])
def test_settings_at_the_edges_are_accepted(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    config.load(path)


def test_run_settings_at_the_edges_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[guest]\nmemory = 128\nbdf = ["0000:b3:00.0"]\naddress = "198.19.0.2/30"\n'
                    'uri = "qemu+ssh://root@server/system"\nboot_timeout = 86400\n')
    cfg = config.load_run(path)
    assert cfg.guest.address == "198.19.0.2/30" and cfg.guest.bdf == ("0000:b3:00.0",)


def test_the_examples_and_the_embedded_experiment_still_validate() -> None:
    config.load_run(None)
    for example in sorted(Path(__file__).resolve().parents[2].glob("examples/*.toml")):
        config.load(example)


def test_a_manifest_with_hostile_values_is_refused_on_resume() -> None:
    with pytest.raises(HarnessError, match=r"config\.instance\[0\]\.name"):
        config.from_json({"instance": [{"name": "../../etc"}]})
    with pytest.raises(HarnessError, match=r"config\.sweep\.wait must be a finite number"):
        config.from_json({"sweep": {"wait": float("inf")}})
    with pytest.raises(HarnessError, match="control character"):
        config.from_json({"instance": [{"name": "a", "nginx": "\udc80"}]})


@pytest.mark.parametrize(("text", "needle"), [
    ("channels = -1\n", "channels"),
    ("rfs = 2147483648\n", "rfs"),
    ("rps = 1\n", "rps"),
    ('vfio_irqs = "everywhere"\n', "vfio_irqs must be off-vcpus or keep"),
    ('[sysctl]\n"../../etc/x" = 1\n', "is not a sysctl name"),
    ('[sysctl]\n"net.core.somaxconn" = 1.5\n', "net.core.somaxconn must be int or str"),
    ('[sysctl]\n"net.core.somaxconn" = "1\\n2"\n', "control character"),
    ('name = "other"\n', "name"),
    ("sysctl = 3\n", "sysctl"),
    ("base = 1\n", "base"),
])
def test_a_hostile_profile_is_refused_naming_the_knob(tmp_path: Path, text: str, needle: str) -> None:
    _refused(lambda p: profile.load(str(p)), tmp_path / "p.toml", text, needle, "p.toml")


# --- flags --------------------------------------------------------------------------------------

def _snapshot(tmp_path: Path) -> str:
    host = FakeHost(tmp_path / "root", nodes=2, node_mib=1024)
    host.pci("0000:b3:00.0", MLX, CX5, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f0",))
    host.finish()
    return str(host.base)


PREPARE = ("--dry-run", "--bdf", "b3:00.0")
FLAG_CASES = {
    "hugepages-no-unit": (("host-prepare", *PREPARE, "--hugepages", "1500"), "--hugepages"),
    "hugepages-unknown-unit": (("host-prepare", *PREPARE, "--hugepages", "8X"), "--hugepages"),
    "hugepages-negative": (("host-prepare", *PREPARE, "--hugepages=-8G"), "--hugepages"),
    "hugepages-zero": (("host-prepare", *PREPARE, "--hugepages", "0G"), "--hugepages"),
    "hugepages-huge": (("host-prepare", *PREPARE, "--hugepages", "99999999999T"), "--hugepages"),
    "hugepages-float": (("host-prepare", *PREPARE, "--hugepages", "1.5G"), "--hugepages"),
    "hugepages-empty": (("host-prepare", *PREPARE, "--hugepages", ""), "--hugepages"),
    "hugepage-size-4k": (("host-prepare", *PREPARE, "--hugepages", "1G", "--hugepage-size", "4K"), "--hugepage-size"),
    "node-negative": (("host-prepare", *PREPARE, "--hugepages", "1G", "--node=-1"), "--node"),
    "node-word": (("host-prepare", *PREPARE, "--hugepages", "1G", "--node", "x"), "--node"),
    "node-exponent": (("host-prepare", *PREPARE, "--hugepages", "1G", "--node", "1e9"), "--node"),
    "node-huge": (("host-prepare", *PREPARE, "--hugepages", "1G", "--node", "99999"), "--node"),
    "node-empty": (("host-prepare", *PREPARE, "--hugepages", "1G", "--node", ""), "--node"),
    "node-absent": (("host-prepare", *PREPARE, "--hugepages", "1G", "--node", "7"), "--node 7"),
    "bdf-empty": (("host-prepare", "--dry-run", "--bdf", ""), "--bdf"),
    "bdf-path": (("host-prepare", "--dry-run", "--bdf", "../../etc"), "--bdf", "../../etc"),
    "bdf-injection": (("host-prepare", "--dry-run", "--bdf", "0000:b3:00.0;id"), "--bdf"),
    "setup-hugepages-no-unit": (("host-setup", "--print", "--bdf", "b3:00.0", "--hugepages", "1500"), "--hugepages"),
    "setup-node-word": (("host-setup", "--print", "--bdf", "b3:00.0", "--hugepages", "1G", "--node", "x"), "--node"),
    "setup-without-print": (("host-setup", "--bdf", "b3:00.0"), "--print"),
    "groups-bdf-empty": (("host-groups", "--bdf", ""), "--bdf"),
    "groups-bdf-newline": (("host-groups", "--bdf", "b3:00.0\n"), "--bdf"),
    "groups-class-unknown": (("host-groups", "--class", "toasters"), "toasters"),
    "snapshot-empty-name": (("host-snapshot", ""), "OUT"),
}


@pytest.mark.parametrize(("argv", "needles"), [(a, n) for a, *n in FLAG_CASES.values()], ids=list(FLAG_CASES))
def test_a_hostile_flag_is_refused_naming_it(cli, tmp_path: Path, argv: tuple[str, ...], needles: list[str]) -> None:
    root = _snapshot(tmp_path)
    assert_one_line_error(cli(*argv[:1], "--host-root", root, *argv[1:]), *needles)


def test_an_empty_host_root_is_not_the_live_host(cli) -> None:
    assert_one_line_error(cli("host-check", "--host-root", ""), "--host-root")


def test_a_hostile_command_word_is_refused_in_one_line(cli) -> None:
    assert_one_line_error(cli("host-chek"), "invalid choice")
    assert_one_line_error(cli("--no-such-flag"), "--no-such-flag")


def test_the_flags_accept_what_they_document(cli, tmp_path: Path) -> None:
    root = _snapshot(tmp_path)
    code, out, err = cli("host-prepare", "--host-root", root, "--dry-run", "--bdf", "0000:B3:00.0",
                         "--hugepages", "256M", "--node", "1", "--json")
    assert (code, err) == (0, ""), err
    assert '"node": 1' in out
