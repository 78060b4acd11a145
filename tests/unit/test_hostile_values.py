"""Values that must be refused, tried through the real command (tests/hostile_kit.py): libvirt URIs
that could run a program or read a key, wire addresses no link can hold or that the host already
routes elsewhere, CPU lists a kernel never writes, digits that are not ASCII, environment values
and names from host trees with control characters in them; QEMU options outside qemu_args'
allow-list, contradictory CPU bits, a study reference the kernel reads as turning its switches off, a
run folder whose study names a switch twice. Each case: exit 2, one `error:` line naming the key,
flag, file or variable, one `hint:` line, no traceback, nothing changed.
tests/unit/test_hostile_values_real.py holds what a table cannot check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import hostile_kit
from tests.fakehost import FakeHost
from tests.hostile_kit import GOOD_MANIFEST, PWNED, Case, Outcomes, S, both, run_toml, snapshot_host, snapshot_with

NIC = "0000:b3:00.0"
NODE0 = "sys/devices/system/node/node0/cpulist"
ONLINE = "sys/devices/system/cpu/online"
VM_XML = ("vm", "up", "--print-xml", *S)  # places the guest on node 0's CPUs before it prints anything
WIRE = ("run", "--bdf", NIC, "--print-xml", *S)


def _uri(uri: str) -> hostile_kit.Build:
    return run_toml(f'[guest]\nuri = "{uri}"\n')


def _routed(dest: str, mask: str, iface: str = "eth0") -> hostile_kit.Build:
    """The snapshot host with one more route: `dest/mask` through `iface` (a lab network, say)."""
    def build(cwd: Path) -> None:
        host = FakeHost(cwd / "snap", nodes=2, node_mib=1024)
        host.pci(NIC, hostile_kit.MLX, hostile_kit.CX5, driver="mlx5_core", group=40, numa=1, netdevs=("ens1f0",))
        host.pci("0000:00:02.0", 0x8086, 0x10D3, driver="e1000e", group=1, numa=0, netdevs=("eth0",))
        host.route("eth0", "0.0.0.0", "0.0.0.0", "192.0.2.1")
        host.route(iface, dest, mask, "192.0.2.1")
    return build


def _also(rel: str, content: str) -> hostile_kit.Build:
    """One more file of the snapshot replaced (after a build that made the snapshot)."""
    def build(cwd: Path) -> None:
        (cwd / "snap" / rel).write_text(content)
    return build


def _driver_named(name: str) -> hostile_kit.Build:
    """The snapshot host whose NIC's driver link points at a driver folder called `name`."""
    def build(cwd: Path) -> None:
        snapshot_host(cwd)
        dev = (cwd / "snap/sys/bus/pci/devices" / NIC).resolve()
        drv = cwd / "snap/sys/bus/pci/drivers" / name
        drv.mkdir(parents=True)
        (dev / "driver").unlink()
        (dev / "driver").symlink_to(os.path.relpath(drv, dev))
    return build


def _netdev_named(name: str) -> hostile_kit.Build:
    def build(cwd: Path) -> None:
        snapshot_host(cwd)
        (cwd / "snap/sys/class/net" / name).symlink_to("../../devices/virtual/net/lo")
    return build


# qemu_args that would run a program, open a port or read a host file: (id, TOML array, index, said)
QEMU_ARGS = [
    ("incoming-exec", f'["-incoming", "exec:touch {PWNED}"]', 0, "'-incoming' is not allowed"),
    ("tap-script", f'["-netdev", "tap,id=n0,script={PWNED}"]', 0, "'-netdev' is not allowed"),
    ("monitor-tcp", '["-monitor", "tcp:127.0.0.1:4444,server,nowait"]', 0, "'-monitor' is not allowed"),
    ("chardev-file", f'["-chardev", "file,id=c0,path={PWNED}"]', 0, "'-chardev' is not allowed"),
    ("double-dash", '["--qmp", "unix:/tmp/vmh-hostile.sock,server"]', 0, "'--qmp' is not allowed"),
    ("joined", f'["-pidfile={PWNED}"]', 0, "is not allowed"),
    ("hidden-in-global", '["-global", "-plugin"]', 1, "is not DRIVER.PROPERTY=VALUE"),
    ("global-romfile", '["-global", "e1000.romfile=shadow"]', 1, "romfile"),
    ("smbios-file", '["-smbios", "type=1,file=/etc/shadow"]', 1, "'file'"),
    ("bare-word", '["-global", "ICH9-LPC.noreboot=off", "/etc/shadow"]', 2, "is not an option"),
]


def cases() -> list[Case]:
    return [
        # libvirt URIs: no transport or parameter that runs a program or names a socket or a key
        Case("uri-ext-transport", ("run", "r.toml", "--print-xml"), ("guest.uri", "transport ext"),
             _uri("qemu+ext:///system?command=/usr/bin/touch")),
        Case("uri-command", ("run", "r.toml", "--print-xml"), ("guest.uri", "command="),
             _uri("qemu+ssh://server1/system?command=/bin/sh")),
        Case("uri-command-escaped", ("run", "r.toml", "--print-xml"), ("guest.uri", "comm%61nd"),
             _uri("qemu+ssh://server1/system?comm%61nd=/bin/sh")),
        Case("uri-command-after-semicolon", ("run", "r.toml", "--print-xml"), ("guest.uri", "mode="),
             _uri("qemu+ssh://server1/system?mode=auto;command=/bin/sh")),
        Case("uri-socket", ("run", "r.toml", "--print-xml"), ("guest.uri", "socket="),
             _uri("qemu+unix:///system?socket=/tmp/vmh-hostile.sock")),
        Case("uri-keyfile", ("run", "r.toml", "--print-xml"), ("guest.uri", "keyfile="),
             _uri("qemu+ssh://server1/system?keyfile=/root/.ssh/id_rsa")),
        Case("uri-netcat", ("run", "r.toml", "--print-xml"), ("guest.uri", "netcat="),
             _uri("qemu+ssh://server1/system?netcat=/tmp/nc")),
        Case("uri-no-verify", ("run", "r.toml", "--print-xml"), ("guest.uri", "no_verify="),
             _uri("qemu://server1/system?no_verify=1")),
        Case("uri-embed-root", ("run", "r.toml", "--print-xml"), ("guest.uri", "/embed"),
             _uri("qemu:///embed?root=/tmp")),
        Case("uri-option-user", ("run", "r.toml", "--print-xml"), ("guest.uri", "starts with '-'"),
             _uri("qemu+ssh://-oProxyCommand=x@server1/system")),
        Case("uri-host-with-a-blank", ("run", "r.toml", "--print-xml"), ("guest.uri",),
             _uri("qemu+ssh://server 1/system")),
        Case("vm-up-uri-ext", ("vm", "up", "--uri", f"qemu+ext:///system?command={PWNED}", "--print-xml"),
             ("--uri", "transport ext")),
        Case("vm-up-uri-tcp", ("vm", "up", "--uri", "qemu+tcp://server1/system", "--print-xml"),
             ("--uri", "transport tcp")),
        # wire addresses: unicast, a prefix with room for two hosts, not routed elsewhere
        Case("address-prefix-0", (*WIRE, "--address", "198.19.0.2/0"), ("--address", "/0"), snapshot_host),
        Case("address-prefix-31", (*WIRE, "--address", "198.19.0.2/31"), ("--address", "/31"), snapshot_host),
        Case("address-loopback", (*WIRE, "--address", "127.0.0.2/24"), ("--address", "loopback"), snapshot_host),
        Case("address-multicast", (*WIRE, "--address", "224.0.0.2/24"), ("--address", "multicast"), snapshot_host),
        Case("address-link-local", (*WIRE, "--client-address", "169.254.7.1/24"), ("--client-address", "link-local"),
             snapshot_host),
        Case("address-this-network", (*WIRE, "--address", "0.0.0.2/24"), ("--address", "0.0.0.0/8"), snapshot_host),
        Case("address-reserved", ("run", "r.toml", "--print-xml"), ("guest.client_address", "240.0.0.0/4"),
             run_toml('[guest]\nclient_address = "255.255.255.1/24"\n')),
        Case("address-full-width", (*WIRE, "--address", "198.19.0.２/24"), ("--address",), snapshot_host),
        Case("address-routed-elsewhere", (*WIRE, "--address", "10.1.2.2/24"), ("--address", "10.1.0.0/16", "eth0"),
             _routed("10.1.0.0", "255.255.0.0")),
        Case("address-holds-a-routed-network", (*WIRE, "--address", "10.1.2.2/16"),
             ("--address", "10.1.2.0/24", "eth0"), _routed("10.1.2.0", "255.255.255.0")),
        Case("address-default-wire-routed", WIRE, ("guest.address", "(its default)", "198.19.0.0/16", "eth0"),
             _routed("198.19.0.0", "255.255.0.0")),
        Case("client-address-routed-elsewhere", ("run", "r.toml", "--print-xml", *S),
             ("guest.client_address", "10.1.0.0/16"),
             both(_routed("10.1.0.0", "255.255.0.0"), run_toml(f'[guest]\nbdf = ["{NIC}"]\n'
                                                               'client_address = "10.1.2.1/24"\n'))),
        # CPU lists as a damaged host tree holds them
        Case("cpulist-empty-element", VM_XML, ("node0/cpulist", "empty element"), snapshot_with(NODE0, "0,,1\n")),
        Case("cpulist-trailing-comma", VM_XML, ("node0/cpulist", "empty element"), snapshot_with(NODE0, "0,\n")),
        Case("cpulist-repeated", VM_XML, ("node0/cpulist", "CPU 0 is named twice"), snapshot_with(NODE0, "0,0\n")),
        Case("cpulist-overlapping-range", VM_XML, ("node0/cpulist", "CPU 2 is named twice"),
             snapshot_with(NODE0, "0-3,2\n")),
        Case("cpulist-full-width", VM_XML, ("node0/cpulist",), snapshot_with(NODE0, "０-1\n")),
        Case("cpulist-online-repeated", VM_XML, ("cpu/online", "named twice"),
             both(snapshot_with(NODE0, "\n"), _also(ONLINE, "0-1,1\n"))),
        Case("cpulist-tune-backwards", ("tune", "plan", *S), ("node0/cpulist", "backwards"),
             snapshot_with(NODE0, "1-0\n")),
        # ASCII digits only, in flags and in host files
        Case("hugepages-full-width", ("host-prepare", *S, "--dry-run", "--bdf", NIC, "--hugepages", "８G"),
             ("--hugepages",), snapshot_host),
        Case("node-full-width", ("host-prepare", *S, "--dry-run", "--bdf", NIC, "--hugepages", "8M", "--node", "１"),
             ("--node",), snapshot_host),
        Case("memory-full-width", ("vm", "up", "--memory", "１０２４", "--print-xml"), ("--memory", "ASCII")),
        Case("vcpus-underscore", ("vm", "up", "--vcpus", "1_0", "--print-xml"), ("--vcpus", "ASCII")),
        Case("grace-full-width", ("vm", "down", "x", "--grace", "１"), ("--grace", "ASCII")),
        Case("class-full-width", ("host-groups", *S, "--class", "０２"), ("class",), snapshot_host),
        Case("numa-node-full-width", ("host-groups", *S, "--json"), ("numa_node",),
             snapshot_with(f"sys/bus/pci/devices/{NIC}/numa_node", "１\n")),
        Case("nr-hugepages-full-width", ("host-prepare", *S, "--dry-run", "--bdf", NIC, "--hugepages", "8M"),
             ("nr_hugepages",),
             snapshot_with("sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "１２\n")),
        Case("vendor-full-width", ("host-groups", *S), ("vendor",),
             snapshot_with(f"sys/bus/pci/devices/{NIC}/vendor", "0x１５b3\n")),
        Case("meminfo-superscript", ("host-prepare", *S, "--dry-run", "--bdf", NIC, "--hugepages", "8M"),
             ("node1/meminfo",),
             snapshot_with("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:  ²048 kB\n")),
        # environment values and names from host trees with control characters
        Case("env-host-root-newline", ("host-check",), ("VMHARNESS_HOST_ROOT",), snapshot_host,
             env={"VMHARNESS_HOST_ROOT": "snap\n"}),
        Case("env-ssh-config-newline", ("tune", "plan", "--target", "client:127.0.0.1"), ("VMHARNESS_SSH_CONFIG",),
             env={"VMHARNESS_SSH_CONFIG": "/dev/null\n"}),
        Case("env-image-dir-escape", ("vm", "up", "--print-xml"), ("VMHARNESS_IMAGE_DIR",),
             env={"VMHARNESS_IMAGE_DIR": "/tmp/vmh-images\x1b[2J"}),
        Case("driver-name-newline", ("host-setup", "--print", *S, "--bdf", NIC), ("driver", "control character"),
             _driver_named("mlx5_core\nsoftdep evil pre: vfio-pci")),
        Case("netdev-name-escape", ("host-groups", *S), ("/sys/class/net", "control character"),
             _netdev_named("eth\x1b[31m")),
        Case("route-iface-escape", ("host-prepare", *S, "--dry-run", "--bdf", "0000:00:02.0"), ("/proc/net/route",),
             snapshot_with("proc/net/route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\t"
                           "Window\tIRTT\neth\x1b[1m\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")),
        # an attribution study ([study]): its switches become words of the guest's cmdline
        Case("study-switch-shell", ("run", "r.toml", "--print-xml"), ("study.switches",),
             run_toml('[study]\nswitches = ["pti=off $(touch ' + PWNED + ')"]\n')),
        Case("study-switch-twice", ("run", "r.toml", "--print-xml"), ("study.switches", "twice"),
             run_toml('[study]\nswitches = ["pti", "pti"]\n')),
        Case("study-switch-not-a-list", ("run", "r.toml", "--print-xml"), ("study.switches",),
             run_toml('[study]\nswitches = "pti"\n')),
        Case("study-reference-all-off", ("run", "r.toml", "--print-xml"), ("study.switches", "mitigations=off"),
             run_toml('[[instance]]\nname = "a"\ncmdline = "mitigations=off"\n[study]\nswitches = ["pti"]\n')),
        Case("study-name-taken", ("run", "r.toml", "--print-xml"), ("study.switches", "no-pti"),
             run_toml('[[instance]]\nname = "a"\n[[instance]]\nname = "no-pti"\n[study]\nswitches = ["pti"]\n')),
        Case("study-all-and-more", ("run", "r.toml", "--print-xml"), ("study.switches", "not alone"),
             run_toml('[study]\nswitches = ["all", "pti"]\n')),
        Case("study-neighbours-text", ("run", "r.toml", "--print-xml"), ("study.neighbours",),
             run_toml('[study]\nswitches = ["pti"]\nneighbours = "$(touch ' + PWNED + ')"\n')),
        Case("study-unknown-key", ("run", "r.toml", "--print-xml"), ("study.all_on",),
             run_toml('[study]\nswitches = ["pti"]\nall_on = "x"\n')),
        Case("study-switch-twice-in-a-run-folder", ("report", "rd"), ("rd/manifest.json", "config.study.switches",
                                                                      "'pti' twice"),
             hostile_kit.a_run_dir(GOOD_MANIFEST.replace('}]}', '}], "study": {"switches": ["pti", "pti"]}}'),
                                   hostile_kit.GOOD_RECORDS)),
        Case("study-reference-quoted-mitigations-off", ("run", "r.toml", "--print-xml"),
             ("study.switches", "turns every mitigation off"),
             run_toml('[[instance]]\nname = "a"\ncmdline = \'"mitigations=off"\'\n[study]\nswitches = ["pti"]\n')),
        Case("study-reference-nopti-inside-quotes", ("run", "r.toml", "--print-xml"),
             ("study.switches", "'nopti' is read two ways"),
             run_toml('[[instance]]\nname = "a"\ncmdline = \'foo="a nopti b"\'\n[study]\nswitches = ["pti"]\n')),
        Case("study-reference-already-off", ("run", "r.toml", "--print-xml"),
             ("study.switches", "already turns pti off"),
             run_toml('[[instance]]\nname = "a"\ncmdline = "nopti"\n[study]\nswitches = ["pti"]\n')),
        # an instance's CPU bits: each named once
        Case("cpu-features-contradict", ("run", "r.toml", "--print-xml"),
             ("instance[0].cpu_features[1] '+md-clear' contradicts", "cpu_features[0] '-md-clear'"),
             run_toml('[[instance]]\nname = "a"\ncpu_features = ["-md-clear", "+md-clear"]\n')),
        Case("cpu-features-repeat-underscore", ("run", "r.toml", "--print-xml"),
             ("instance[0].cpu_features[1] '-md_clear' repeats",),
             run_toml('[[instance]]\nname = "a"\ncpu_features = ["-md-clear", "-md_clear"]\n')),
        # qemu_args: an allow-list (tests/unit/test_qemu_args.py holds the whole table)
        *(Case(f"qemu-args-{name}", ("run", "r.toml", "--print-xml"), (f"instance[0].qemu_args[{i}]", said),
               run_toml(f'[[instance]]\nname = "a"\nqemu_args = {args}\n'))
          for name, args, i, said in QEMU_ARGS),
        # what a run counts to explain a cost ([explain]): a switch and a duration, nothing that runs
        Case("explain-syscalls-text", ("run", "r.toml", "--print-xml"), ("explain.syscalls",),
             run_toml('[explain]\nsyscalls = "$(touch ' + PWNED + ')"\n')),
        Case("explain-profile-text", ("run", "r.toml", "--print-xml"), ("explain.profile",),
             run_toml('[explain]\nprofile = "$(touch ' + PWNED + ')"\n')),
        Case("explain-profile-number", ("run", "r.toml", "--print-xml"), ("explain.profile",),
             run_toml('[explain]\nprofile = 999\n')),
        Case("explain-duration-zero", ("run", "r.toml", "--print-xml"), ("explain.duration",),
             run_toml('[explain]\nsyscalls = true\nduration = 0\n')),
        Case("explain-duration-too-short-to-count", ("run", "r.toml", "--print-xml"),
             ("explain.duration 1.5 is too short to count system calls",),
             run_toml('[explain]\nsyscalls = true\nduration = 1.5\n')),
        Case("explain-duration-nan", ("run", "r.toml", "--print-xml"), ("explain.duration",),
             run_toml('[explain]\nsyscalls = true\nduration = nan\n')),
        Case("explain-unknown-key", ("run", "r.toml", "--print-xml"), ("explain.trigger",),
             run_toml('[explain]\ntrigger = "hist:keys=common_pid"\n')),
    ]


CASES = cases()
outcomes = hostile_kit.fixture(CASES)


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 25


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_value_that_makes_no_sense_is_refused_in_one_line(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
