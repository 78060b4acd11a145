"""Hostile and damaged input, tried as a careless or malicious user would, across every subcommand.

Each case runs the real `vmharness` command in a fresh working folder and must end in exit 2 (1 where a
command's own contract says so) with one `error:` line naming what is wrong and one `hint:` line, no
traceback, within a time limit (a FIFO must not hang a reader), and nothing changed outside what the
command may write: its working folder stays as it was, a `--host-root` tree stays byte for byte, and
nothing is left in its own `/tmp` and `/run/vmharness` (tests/own_mounts.py). The cases run two at a
time (the machine has two cores).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tests import hostile_kit
from tests.hostile_kit import (
    GOOD_MANIFEST,
    GOOD_RECORDS,
    HOSTILE_HOST,
    NON_UTF8,
    PWNED,
    Case,
    Outcomes,
    S,
    a_run_dir,
    bench_toml,
    both,
    fifo_at,
    measurement,
    run_toml,
    snapshot_host,
    snapshot_with,
    snapshot_without,
    with_fifo,
    with_file,
)


def cases() -> list[Case]:
    c = [
        # the command line itself
        Case("unknown-option", ("host-check", "--frobnicate"), ("unrecognized arguments",)),
        Case("misspelt-command", ("host-chekc",), ("invalid choice",)),
        # --host-root and VMHARNESS_HOST_ROOT
        Case("host-root-empty", ("host-check", "--host-root", ""), ("--host-root",)),
        Case("host-root-missing", ("host-check", "--host-root", "nope"), ("nope",)),
        Case("host-root-a-file", ("host-groups", "--host-root", "f"), ("f",), with_file("f", "x")),
        Case("host-root-not-like-root", ("host-check", "--host-root", "d"), ("sys/",), with_file("d/x", "")),
        Case("host-root-is-proc", ("host-check", "--host-root", "/proc"), ("proc/",)),
        Case("host-root-env-missing", ("host-groups",), ("nope",), env={"VMHARNESS_HOST_ROOT": "nope"}),
        Case("fifo-in-snapshot", ("host-groups", *S), ("class",), with_fifo),
        Case("fifo-in-snapshot-prepare", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0"), ("class",), with_fifo),
        Case("huge-sysfs-file", ("host-groups", *S), ("class",),
             snapshot_with("sys/bus/pci/devices/0000:b3:00.0/class", "0x020000\n" + "x" * (2 << 20))),
        Case("escaping-symlink", ("host-groups", *S), ("outside",),
             both(snapshot_host, lambda d: (d / "snap/sys/bus/pci/devices/0000:00:09.0").symlink_to("/sys/devices"))),
        Case("missing-class", ("host-groups", *S), ("class",),
             snapshot_without("sys/bus/pci/devices/0000:b3:00.0/class")),
        # host-groups
        Case("groups-bdf-empty", ("host-groups", *S, "--bdf", ""), ("--bdf",), snapshot_host),
        Case("groups-bdf-garbage", ("host-groups", *S, "--bdf", "zz:zz.z"), ("zz:zz.z",), snapshot_host),
        Case("groups-bdf-injection", ("host-groups", *S, "--bdf", "0000:b3:00.0;id"), ("0000:b3:00.0;id",),
             snapshot_host),
        Case("groups-class-unknown", ("host-groups", *S, "--class", "toasters"), ("toasters",), snapshot_host),
        Case("groups-numa-garbage", ("host-groups", *S, "--json"), ("numa_node",),
             snapshot_with("sys/bus/pci/devices/0000:b3:00.0/numa_node", "one\n")),
        # host-snapshot
        Case("snapshot-onto-a-folder", ("host-snapshot", *S, "out"), ("out",),
             both(snapshot_host, with_file("out/x", ""))),
        Case("snapshot-into-nowhere", ("host-snapshot", *S, "no/such/dir/s.tgz"), ("no/such/dir",), snapshot_host),
        Case("snapshot-empty-name", ("host-snapshot", *S, ""), ("OUT",), snapshot_host),
        # host-prepare (a plan on a snapshot; a change refused there)
        Case("prepare-hugepages-no-unit", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages", "1500"),
             ("--hugepages",), snapshot_host),
        Case("prepare-hugepages-negative", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages=-8G"),
             ("--hugepages",), snapshot_host),
        Case("prepare-hugepages-unit", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages", "8X"),
             ("--hugepages",), snapshot_host),
        Case("prepare-hugepages-huge", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages",
                                        "99999999999T"), ("--hugepages",), snapshot_host),
        Case("prepare-hugepages-nan", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages", "nanG"),
             ("--hugepages",), snapshot_host),
        Case("prepare-libvirt-probe-damaged", ("host-prepare", *S, "--dry-run", "--hugepages", "64M"),
             ("vmharness-probes.json", "libvirt"),
             snapshot_with("vmharness-probes.json", '{"libvirt": {"daemon": {"pid": "1;id", "name": "libvirtd"}}}')),
        Case("prepare-node-negative", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages", "1G",
                                       "--node=-1"), ("--node",), snapshot_host),
        Case("prepare-node-word", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages", "1G",
                                   "--node", "x"), ("--node",), snapshot_host),
        Case("prepare-node-float", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages", "1G",
                                    "--node", "1e9"), ("--node",), snapshot_host),
        Case("prepare-node-absent", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages", "1G",
                                     "--node", "7"), ("node 7",), snapshot_host),
        Case("prepare-bdf-empty", ("host-prepare", *S, "--dry-run", "--bdf", ""), ("--bdf",), snapshot_host),
        Case("prepare-bdf-path", ("host-prepare", *S, "--dry-run", "--bdf", "../../etc"), ("../../etc",),
             snapshot_host),
        Case("prepare-size-choice", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepage-size", "4K"),
             ("--hugepage-size",), snapshot_host),
        Case("prepare-on-a-snapshot", ("host-prepare", *S, "--bdf", "b3:00.0"), ("--host-root",), snapshot_host),
        Case("prepare-nr-hugepages-garbage", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0", "--hugepages",
                                              "1G"), ("nr_hugepages",),
             snapshot_with("sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "lots\n")),
        Case("prepare-route-table-unreadable", ("host-prepare", *S, "--dry-run", "--bdf", "00:02.0"),
             ("/proc/net/route",), snapshot_without("proc/net/route")),
        Case("prepare-vlan-table-garbled", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0"),
             ("/proc/net/vlan/config line 1",), snapshot_with("proc/net/vlan/config", "garbage\n")),
        Case("prepare-vlan-name-hostile", ("host-prepare", *S, "--dry-run", "--bdf", "b3:00.0"),
             ("/proc/net/vlan/config line 3",), snapshot_with(
                 "proc/net/vlan/config", f"VLAN Dev name | VLAN ID\nName-Type: X\n$(touch {PWNED}) | 5 | ens1f0\n")),
        # host-restore
        Case("restore-on-a-snapshot", ("host-restore", *S), ("--host-root",), snapshot_host),
        Case("restore-corrupt-journal", ("host-restore", *S, "--dry-run"), ("journal.jsonl",),
             snapshot_with("run/vmharness/journal.jsonl", '{"seq": 1, "op": "pages"}\nnot json\n{"seq": 3}\n')),
        Case("restore-journal-not-records", ("host-restore", *S, "--dry-run"), ("journal.jsonl",),
             snapshot_with("run/vmharness/journal.jsonl", "[1, 2]\n[3]\n")),
        Case("restore-journal-unknown-op", ("host-restore", *S, "--dry-run"), ("netns",),
             snapshot_with("run/vmharness/journal.jsonl", '{"seq": 1, "op": "netns", "time": 1}\n'), code=1),
        # host-setup
        Case("setup-without-print", ("host-setup", *S, "--bdf", "b3:00.0"), ("--print",), snapshot_host),
        Case("setup-hugepages-no-unit", ("host-setup", *S, "--print", "--bdf", "b3:00.0", "--hugepages", "1500"),
             ("--hugepages",), snapshot_host),
        Case("setup-node-word", ("host-setup", *S, "--print", "--bdf", "b3:00.0", "--hugepages", "1G", "--node", "x"),
             ("--node",), snapshot_host),
        # image build
        Case("image-recipe-missing", ("image", "build", "--recipe", "nope", "--image-dir", "imgs"), ("nope",)),
        Case("image-recipe-a-file", ("image", "build", "--recipe", "f", "--image-dir", "imgs"), ("f",),
             with_file("f", "")),
        Case("image-recipe-not-utf8", ("image", "build", "--recipe", "rec", "--image-dir", "imgs"), ("recipe.toml",),
             with_file("rec/recipe.toml", NON_UTF8)),
        Case("image-kernel-missing", ("image", "build", "--kernel", "nope", "--image-dir", "imgs"), ("nope",)),
        # vm
        Case("vm-up-name-path", ("vm", "up", "--name", "../x", "--print-xml"), ("--name",)),
        Case("vm-up-name-empty", ("vm", "up", "--name", "", "--print-xml"), ("--name",)),
        Case("vm-up-name-shell", ("vm", "up", "--name", "a b;$(touch " + PWNED + ")", "--print-xml"), ("--name",)),
        Case("vm-up-name-dash", ("vm", "up", "--name=-x", "--print-xml"), ("--name",)),
        Case("vm-up-name-long", ("vm", "up", "--name", "x" * 64, "--print-xml"), ("--name",)),
        Case("vm-up-memory-negative", ("vm", "up", "--memory=-5", "--print-xml"), ("--memory",)),
        Case("vm-up-vcpus-negative", ("vm", "up", "--vcpus=-1", "--print-xml"), ("--vcpus",)),
        Case("vm-up-timeout-inf", ("vm", "up", "--boot-timeout", "inf", "--print-xml"), ("--boot-timeout",)),
        Case("vm-up-timeout-nan", ("vm", "up", "--boot-timeout", "nan", "--print-xml"), ("--boot-timeout",)),
        Case("vm-up-uri-ssh-option", ("vm", "up", "--uri", "qemu+ssh://-oProxyCommand=x/system", "--print-xml"),
             ("-oProxyCommand",)),
        Case("vm-up-kernel-missing", ("vm", "up", "--kernel", "nope", "--print-xml"), ("nope",)),
        Case("vm-up-on-a-snapshot", ("vm", "up", *S), ("--host-root",), snapshot_host),
        Case("vm-exec-name-path", ("vm", "exec", "../../etc/passwd", "--", "true"), ("../../etc/passwd",)),
        Case("vm-exec-timeout-nan", ("vm", "exec", "x", "--timeout", "nan", "--", "true"), ("--timeout",)),
        Case("vm-console-name-empty", ("vm", "console", ""), ("name",)),
        Case("vm-console-lines-negative", ("vm", "console", "x", "--lines=-5"), ("--lines",)),
        Case("vm-down-name-path", ("vm", "down", "../x"), ("../x",)),
        Case("vm-down-grace-inf", ("vm", "down", "x", "--grace", "inf"), ("--grace",)),
        # bench: the configuration file
        Case("bench-config-missing", ("bench", "nope.toml"), ("nope.toml",)),
        Case("bench-config-a-folder", ("bench", "d"), ("d",), with_file("d/x", "")),
        Case("bench-config-not-utf8", ("bench", "c.toml"), ("c.toml",), bench_toml(NON_UTF8)),
        Case("bench-config-bad-toml", ("bench", "c.toml"), ("c.toml",), bench_toml("[sweep\n")),
        Case("bench-config-nested-deep", ("bench", "c.toml"), ("c.toml", "nested"),
             bench_toml("x = " + "[" * 5000 + "]" * 5000 + "\n")),
        Case("bench-config-a-fifo", ("bench", "p"), ("FIFO",), lambda d: os.mkfifo(d / "p")),
        Case("bench-nginx-an-option", ("bench", "c.toml"), ("nginx",),
             bench_toml('[[instance]]\nname = "a"\nnginx = "-x"\n')),
        Case("bench-unknown-key", ("bench", "c.toml"), ("sweep.speed",), bench_toml("[sweep]\nspeed = 1\n")),
        Case("bench-wrong-type", ("bench", "c.toml"), ("sweep.iterations",),
             bench_toml("[sweep]\niterations = \"3\"\n")),
        Case("bench-name-path", ("bench", "c.toml"), ("name",), bench_toml('[[instance]]\nname = "../../x"\n')),
        Case("bench-name-empty", ("bench", "c.toml"), ("name",), bench_toml('[[instance]]\nname = ""\n')),
        Case("bench-name-shell", ("bench", "c.toml"), ("name",),
             bench_toml(f'[[instance]]\nname = "a b;$(touch {PWNED})"\n')),
        Case("bench-name-dot", ("bench", "c.toml"), ("name",), bench_toml('[[instance]]\nname = ".hidden"\n')),
        Case("bench-name-twice", ("bench", "c.toml"), ("name",),
             bench_toml('[[instance]]\nname = "a"\n[[instance]]\nname = "a"\n')),
        Case("bench-threads-negative", ("bench", "c.toml"), ("threads",), bench_toml("[[client]]\nthreads = -4\n")),
        Case("bench-duration-zero", ("bench", "c.toml"), ("sweep.duration",), bench_toml("[sweep]\nduration = 0\n")),
        Case("bench-duration-huge", ("bench", "c.toml"), ("sweep.duration",),
             bench_toml("[sweep]\nduration = 100000000000\n")),
        Case("bench-wait-inf", ("bench", "c.toml"), ("sweep.wait",), bench_toml("[sweep]\nwait = inf\n")),
        Case("bench-wait-nan", ("bench", "c.toml"), ("sweep.wait",), bench_toml("[sweep]\nwait = nan\n")),
        Case("bench-margin-negative-inf", ("bench", "c.toml"), ("sweep.margin",),
             bench_toml("[sweep]\nmargin = -inf\n")),
        Case("bench-interval-nan", ("bench", "c.toml"), ("samplers.interval",),
             bench_toml("[samplers]\ninterval = nan\n")),
        Case("bench-until-ci-nan", ("bench", "c.toml"), ("sweep.until_ci",), bench_toml("[sweep]\nuntil_ci = nan\n")),
        Case("bench-search-unknown", ("bench", "c.toml"), ("sweep.search",), bench_toml('[sweep]\nsearch = "x;id"\n')),
        Case("bench-connections-too-many", ("bench", "c.toml"), ("sweep.connections",),
             bench_toml('[sweep]\nconnections = "1:1000000000000:1"\n')),
        Case("bench-connections-reversed", ("bench", "c.toml"), ("sweep.connections",),
             bench_toml('[sweep]\nconnections = "256:16:16"\n')),
        Case("bench-connections-zero", ("bench", "c.toml"), ("sweep.connections",),
             bench_toml('[sweep]\nconnections = "0"\n')),
        Case("bench-connections-step-zero", ("bench", "c.toml"), ("sweep.connections",),
             bench_toml('[sweep]\nconnections = "1:10:0"\n')),
        Case("bench-connections-garbage", ("bench", "c.toml"), ("sweep.connections",),
             bench_toml('[sweep]\nconnections = "1;id"\n')),
        Case("bench-iterations-zero", ("bench", "c.toml"), ("sweep.iterations",),
             bench_toml("[sweep]\niterations = 0\n")),
        Case("bench-retries-negative", ("bench", "c.toml"), ("sweep.retries",), bench_toml("[sweep]\nretries = -1\n")),
        Case("bench-filesize-huge", ("bench", "c.toml"), ("server.filesize",),
             bench_toml("[server]\nfilesize = 100000000000\n")),
        Case("bench-workers-negative", ("bench", "c.toml"), ("server.workers",),
             bench_toml("[server]\nworkers = -1\n")),
        Case("bench-client-host-option", ("bench", "c.toml"), ("client",),
             bench_toml(f'[[client]]\nhost = "{HOSTILE_HOST}"\n')),
        Case("bench-server-host-option", ("bench", "c.toml"), ("server.host",),
             bench_toml(f'[server]\nhost = "{HOSTILE_HOST}"\n')),
        Case("bench-profile-missing", ("bench", "c.toml"), ("nope.toml",),
             bench_toml('[tuning]\nprofile = "nope.toml"\n')),
        Case("bench-on-a-snapshot", ("bench", *S), ("--host-root",), snapshot_host),
        Case("bench-snapshot-from-env", ("bench",), ("VMHARNESS_HOST_ROOT",), snapshot_host,
             env={"VMHARNESS_HOST_ROOT": "snap"}),
        Case("bench-resume-missing", ("bench", "--resume", "nope"), ("nope",)),
        Case("bench-resume-corrupt-manifest", ("bench", "--resume", "rd"), ("manifest.json",), a_run_dir("{not json")),
        Case("bench-out-onto-a-file", ("bench", "--out", "f"), ("f",), with_file("f", "x")),
        # run: the experiment
        Case("run-address-without-prefix", ("run", "r.toml", "--print-xml"), ("guest.address",),
             run_toml('[guest]\nbdf = ["0000:b3:00.0"]\naddress = "198.19.0.2"\n')),
        Case("run-memory-tiny", ("run", "r.toml", "--print-xml"), ("guest.memory",),
             run_toml("[guest]\nmemory = 10\n")),
        Case("run-accel-unknown", ("run", "r.toml", "--print-xml"), ("guest.accel",),
             run_toml('[guest]\naccel = "xen"\n')),
        Case("run-boot-timeout-inf", ("run", "r.toml", "--print-xml"), ("guest.boot_timeout",),
             run_toml("[guest]\nboot_timeout = inf\n")),
        Case("run-uri-ssh-option", ("run", "r.toml", "--print-xml"), ("guest.uri",),
             run_toml('[guest]\nuri = "qemu+ssh://-oProxyCommand=x/system"\n')),
        Case("run-kernel-missing", ("run", "r.toml", "--print-xml"), ("kernel",),
             run_toml('[[instance]]\nname = "a"\nkernel = "nope"\n')),
        Case("run-cpu-feature-bad", ("run", "r.toml", "--print-xml"), ("cpu_features",),
             run_toml('[[instance]]\nname = "a"\ncpu_features = ["md-clear"]\n')),
        Case("run-vcpu-cap-over", ("run", "r.toml", "--print-xml"), ("vcpu_cap",),
             run_toml('[[instance]]\nname = "a"\nvcpu_cap = 150\n')),
        Case("run-control-cap-negative", ("run", "r.toml", "--print-xml"), ("control.cap",),
             run_toml("[control]\ncap = -5\n")),
        Case("run-control-name-taken", ("run", "r.toml", "--control", "--print-xml"), ("--control", "control"),
             run_toml('[[instance]]\nname = "a"\n[[instance]]\nname = "control"\ncmdline = "x"\n')),
        Case("run-control-name-shell", ("run", "r.toml", "--print-xml"), ("control.name",),
             run_toml('[control]\ncap = 80\nname = "$(touch ' + PWNED + ')"\n')),
        Case("run-control-on-resume", ("run", "--resume", "rd", "--control"), ("--control",)),
        Case("run-bdf-empty", ("run", "--bdf", "", "--print-xml"), ("--bdf",)),
        Case("run-bdf-garbage", ("run", "--bdf", "zz", "--print-xml"), ("zz",)),
        Case("run-address-flag-without-prefix", ("run", "--bdf", "0000:b3:00.0", "--address", "198.19.0.2",
                                                 "--print-xml", *S), ("--address",), snapshot_host),
        Case("run-address-flag-empty", ("run", "--address", "", "--print-xml", *S), ("--address",), snapshot_host),
        Case("run-client-address-flag-shell", ("run", "--client-address", "a b;$(touch " + PWNED + ")",
                                               "--print-xml", *S), ("--client-address",), snapshot_host),
        Case("run-address-flag-without-a-nic", ("run", "--address", "198.19.0.2/24", "--print-xml", *S),
             ("--address",), snapshot_host),
        Case("run-addresses-flag-and-key-apart", ("run", "r.toml", "--address", "198.19.0.2/24", "--print-xml", *S),
             ("--address", "guest.client_address"),
             both(snapshot_host, run_toml('[guest]\nbdf = ["0000:b3:00.0"]\nclient_address = "10.0.0.1/24"\n'))),
        Case("run-client-address-broadcast", ("run", "r.toml", "--print-xml"), ("guest.client_address",),
             run_toml('[guest]\nclient_address = "198.19.0.255/24"\n')),
        Case("run-on-a-snapshot", ("run", *S), ("--host-root",), snapshot_host),
        Case("run-resume-a-bench-run", ("run", "--resume", "rd"), ("bench",), a_run_dir(GOOD_MANIFEST, GOOD_RECORDS)),
        # tune
        Case("tune-profile-missing", ("tune", "plan", *S, "--profile", "nope.toml"), ("nope.toml",), snapshot_host),
        Case("tune-profile-not-utf8", ("tune", "plan", *S, "--profile", "p.toml"), ("p.toml",),
             both(snapshot_host, with_file("p.toml", NON_UTF8))),
        Case("tune-profile-unknown-knob", ("tune", "plan", *S, "--profile", "p.toml"), ("p.toml",),
             both(snapshot_host, with_file("p.toml", "frobnicate = 1\n"))),
        Case("tune-profile-bad-vfio-irqs", ("tune", "plan", *S, "--profile", "p.toml"), ("p.toml", "vfio_irqs"),
             both(snapshot_host, with_file("p.toml", 'vfio_irqs = "all"\n'))),
        Case("tune-apply-on-a-snapshot", ("tune", "apply", *S), ("--host-root",), snapshot_host),
        Case("tune-revert-on-a-snapshot", ("tune", "revert", *S), ("--host-root",), snapshot_host),
        # campaigns: their own table is tests/unit/test_hostile_campaign.py
        Case("campaign-file-missing", ("campaign", "plan", "nope.toml"), ("nope.toml",)),
        Case("campaign-file-a-fifo", ("campaign", "plan", "c.toml"), ("c.toml",), fifo_at("c.toml")),
        Case("tune-target-unknown", ("tune", "plan", "--target", "toaster"), ("toaster",)),
        Case("tune-target-ssh-option", ("tune", "plan", "--target", "client:" + HOSTILE_HOST), ("client",)),
        Case("tune-target-guest-path", ("tune", "plan", "--target", "guest:../x"), ("guest",)),
        # what host-snapshot now also keeps (sysctls, the journal), replaced by a FIFO
        Case("fifo-sysctl-in-snapshot-tune", ("tune", "plan", *S), ("somaxconn", "FIFO"),
             both(snapshot_host, fifo_at("snap/proc/sys/net/core/somaxconn"))),
        Case("fifo-journal-in-snapshot-run", ("run", "--print-xml", *S), ("journal.jsonl", "FIFO"),
             both(snapshot_host, fifo_at("snap/run/vmharness/journal.jsonl"))),
        # report and compare: damaged run directories
        Case("report-missing", ("report", "nope"), ("nope",)),
        Case("report-not-a-run", ("report", "d"), ("manifest.json",), with_file("d/x", "")),
        Case("report-manifest-corrupt", ("report", "rd"), ("manifest.json",), a_run_dir("{not json")),
        Case("report-manifest-nested-deep", ("report", "rd"), ("manifest.json",),
             a_run_dir("[" * 100000 + "]" * 100000)),
        Case("report-manifest-not-object", ("report", "rd"), ("manifest.json",), a_run_dir("[1, 2]")),
        Case("report-manifest-not-utf8", ("report", "rd"), ("manifest.json",), a_run_dir(b"{\"kind\": \"\xff\"}")),
        Case("report-records-corrupt-middle", ("report", "rd"), ("records.jsonl", "line 2"),
             a_run_dir(GOOD_MANIFEST, measurement("a", 1, 0, 10) + "garbage\n" + GOOD_RECORDS)),
        Case("report-record-wrong-shape", ("report", "rd"), ("records.jsonl line 1", "requests_per_s \"x\""),
             a_run_dir(GOOD_MANIFEST, measurement("a", 1, 0, 10).replace('"requests_per_s": 10',
                                                                   '"requests_per_s": "x"')
                       + GOOD_RECORDS)),
        Case("report-latency-histogram-damaged", ("report", "rd"), ("records.jsonl", "a/1/0", "histogram"),
             a_run_dir(GOOD_MANIFEST, measurement("a", 1, 0, 10).replace('"percentiles"',
                                                                   '"histogram": [[5, -1]], "percentiles"')
                       + GOOD_RECORDS)),
        Case("report-records-not-utf8", ("report", "rd"), ("records.jsonl",), a_run_dir(GOOD_MANIFEST, b"\xff\xfe\n")),
        Case("report-baseline-unknown", ("report", "rd", "--baseline", "zz"), ("--baseline", "zz"),
             a_run_dir(GOOD_MANIFEST, GOOD_RECORDS)),
        Case("report-out-onto-a-file", ("report", "rd", "--out", "f"), ("--out",),
             both(a_run_dir(GOOD_MANIFEST, GOOD_RECORDS), with_file("f", "x"))),
        Case("compare-one-damaged", ("compare", "rd", "bad"), ("manifest.json",),
             both(a_run_dir(GOOD_MANIFEST, GOOD_RECORDS), with_file("bad/manifest.json", "{"))),
    ]
    return c


CASES = cases()


CASES = cases()
outcomes = hostile_kit.fixture(CASES)


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


def test_what_a_command_leaves_in_its_own_tmp_and_run_is_seen_and_this_machines_are_untouched(tmp_path: Path) -> None:
    """The control of the tables' last check: a real command writing into /tmp (a report by `--out`)
    leaves it in its own /tmp, where the case's check sees it and fails; one taking the host's lock
    (`host-restore`) takes it in its own /run/vmharness, which the check allows; this machine's /tmp and
    /run/vmharness get neither, so a second harness beside (another `make test`) neither sees the
    commands' files nor lends them its own."""
    out = f"/tmp/vmh-own-control-{os.getpid()}"
    wrote = Case("writes-into-tmp", ("report", "rd", "--out", out), ("wrote 15 files",),
                 a_run_dir(GOOD_MANIFEST, GOOD_RECORDS), code=0)
    locks = Case("takes-the-lock", ("host-restore",), ("nothing",), code=0)
    real_lock = Path("/run/vmharness/lock")
    lock_before = real_lock.stat().st_mtime_ns if real_lock.exists() else None
    (tmp_path / "cases").mkdir()
    (tmp_path / "own").mkdir()
    got = {c.id: hostile_kit._run(c, tmp_path / "cases", tmp_path / "own") for c in (wrote, locks)}
    assert not os.path.lexists(out)
    assert f"tmp/{out.removeprefix('/tmp/')}/report.txt" in got["writes-into-tmp"].left, got["writes-into-tmp"].left
    with pytest.raises(AssertionError, match="left in its own /tmp or /run/vmharness"):
        hostile_kit.check(wrote, got["writes-into-tmp"])
    assert (tmp_path / "own/takes-the-lock/run/lock").is_file()
    assert (real_lock.stat().st_mtime_ns if real_lock.exists() else None) == lock_before
    hostile_kit.check(locks, got["takes-the-lock"])


def test_there_are_at_least_sixty_cases_and_each_subcommand_has_one() -> None:
    assert len(CASES) >= 60
    from vmharness.cli.main import build_parser

    tried = {" ".join(w for w in c.argv[:2] if not w.startswith("-") and w not in ("snap",)) for c in CASES}
    words = {c.argv[0] for c in CASES}
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = sorted(set(subs.choices) - words)
    assert not missing, f"no hostile case for: {missing} (tried {sorted(tried)})"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_refused_in_one_line(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
