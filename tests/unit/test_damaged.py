"""Damaged inputs: every one ends in one line naming the file and what is wrong with it (exit 2), except a
torn last record, which a crash leaves and which is reported while the rest is used. And the route guard
fails closed: what cannot be read keeps the NIC where it is unless --force."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import forked_cli
from tests.fakehost import FakeHost
from tests.unit.test_cli_errors import assert_one_line_error
from vmharness.errors import HarnessError
from vmharness.host.inspect import hugepages
from vmharness.host.inspect.net import survey, verdict
from vmharness.host.prepare import plan
from vmharness.model import config, tomlfile
from vmharness.rundir.store import RunDir
from vmharness.system.root import HostRoot

MISSING = HarnessError("no such file", "pass one")


# --- TOML ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("content", "fault"), [
    (b"[sweep\n", "Expected ']'"),
    (b'[sweep]\nconnections = "\xff\xfe"\n', "line 2 is not UTF-8"),
    (b"\xef\xbb\xbf\x80", "line 1 is not UTF-8"),
])
def test_a_damaged_toml_file_is_named_with_its_fault(tmp_path: Path, content: bytes, fault: str) -> None:
    (tmp_path / "c.toml").write_bytes(content)
    with pytest.raises(HarnessError) as e:
        tomlfile.read(tmp_path / "c.toml", MISSING)
    assert str(tmp_path / "c.toml") in e.value.message and fault in e.value.message


def test_a_folder_fifo_or_huge_file_given_as_toml_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "big.toml").write_text("# " + "x" * (1 << 20))
    for name, fault in (("", "is a directory"), ("fifo.toml", "is a FIFO"), ("big.toml", "larger than")):
        with pytest.raises(HarnessError, match=fault):
            tomlfile.read(tmp_path / name, MISSING)
    with pytest.raises(HarnessError, match="no such file"):
        tomlfile.read(tmp_path / "absent.toml", MISSING)


def test_bench_with_a_non_utf8_configuration_is_one_line(cli, tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_bytes(b'[sweep]\nconnections = "\xff"\n')
    assert_one_line_error(cli("bench", str(tmp_path / "c.toml")), "c.toml", "not UTF-8")
    assert_one_line_error(cli("bench", str(tmp_path)), str(tmp_path), "directory")
    with pytest.raises(HarnessError, match="not UTF-8"):
        config.load(tmp_path / "c.toml")


# --- run directories -----------------------------------------------------------------------------
def record(inst: str, conns: int, it: int, rps: float) -> dict[str, object]:
    return {"kind": "measurement", "key": f"{inst}/{conns}/{it}", "ok": True, "instance": inst,
            "connections": conns, "iteration": it,
            "client": {"requests_per_s": rps, "requests": int(rps * 10), "errors": {"total": 0},
                       "latency_us": {"percentiles": {"50": 100, "90": 200, "99": 300, "99.9": 400}}},
            "samples": {}}


def a_run(tmp_path: Path) -> RunDir:
    run = RunDir.create(tmp_path / "rd", {"kind": "bench", "config": {"instance": [{"name": "a"}, {"name": "b"}]}})
    for it in range(3):
        for c in (1, 2, 4):
            for inst, f in (("a", 1.0), ("b", 0.9)):
                run.append(record(inst, c, it, f * (1000 * c if c < 4 else 1500) + it))
    return run


def test_a_run_directory_that_is_missing_or_a_file_is_named(cli, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert_one_line_error(cli("report", str(tmp_path / "nope")), "nope", "does not exist")
    assert_one_line_error(cli("report", str(tmp_path / "f")), "is a file, not a run directory")
    assert_one_line_error(cli("report", str(tmp_path)), "no manifest.json")


@pytest.mark.parametrize(("manifest", "fault"), [
    (b"{not json", "manifest.json is not JSON"),
    (b"[1, 2]", "manifest.json is not a JSON object (a list)"),
    (b'{"kind": "\xff"}', "manifest.json line 1 is not UTF-8"),
    (b'{"config": {"instance": "a"}}', "manifest.json has a config that is not an object"),
    (b'{"config": [1]}', "manifest.json has a config that is not an object"),
])
def test_a_damaged_manifest_is_named(cli, tmp_path: Path, manifest: bytes, fault: str) -> None:
    a_run(tmp_path)
    (tmp_path / "rd" / "manifest.json").write_bytes(manifest)
    assert_one_line_error(cli("report", str(tmp_path / "rd")), fault)
    assert_one_line_error(cli("compare", str(tmp_path / "rd"), str(tmp_path / "rd")), fault)


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(cli, tmp_path: Path) -> None:
    a_run(tmp_path)
    (tmp_path / "rd" / "manifest.json").unlink()
    os.mkfifo(tmp_path / "rd" / "manifest.json")
    assert_one_line_error(cli("report", str(tmp_path / "rd")), "manifest.json is a FIFO, not a regular file")


@pytest.mark.parametrize(("bad", "fault"), [
    ("garbage", "records.jsonl line 3 is not JSON"),
    ("[1, 2]", "records.jsonl line 3 is not a record (a JSON list)"),
    ('{"kind": "measurement", "ok": true}', "records.jsonl line 3 is a measurement record without a key"),
])
def test_a_damaged_record_in_the_middle_names_its_line(cli, tmp_path: Path, bad: str, fault: str) -> None:
    run = a_run(tmp_path)
    lines = (run.path / "records.jsonl").read_text().splitlines(keepends=True)
    (run.path / "records.jsonl").write_text("".join([*lines[:2], bad + "\n", *lines[2:]]))
    assert_one_line_error(cli("report", str(run.path)), str(run.path / "records.jsonl"), fault)


@pytest.mark.parametrize("damage", [
    {"samples": {"local": "busy"}}, {"samples": {"local": {"cpu": {"cpu": {"idle": None, "steal": [1]}}}}},
    {"samples": ["local"]}, {"host": "hot"}, {"host": {"vfio_interrupts_per_s": {"0000:b3:00.0": None}}},
    {"host": {"vcpu_busy_percent": "all"}}, {"host": {"vcpu_busy_percent": [90.0], "vcpu_wait_percent": {"0": 5}}},
    {"client": {"clients_detail": ["x", {"threads_cpu": {"percent_of_one": [None, [97]]}}]}},
])  # a figure that is a number but cannot be one (NaN, out of range), or text or true/false where a figure
# belongs, leaves the whole record out instead: tests/unit/test_hostile_records.py, test_hostile_runs.py
def test_damaged_saturation_figures_are_left_out_and_the_rest_reported(cli, tmp_path: Path,
                                                                        damage: dict[str, Any]) -> None:
    """The figures of each side are optional (old records lack them): one of the wrong shape (null, a list, an
    object) is as if absent."""
    run = a_run(tmp_path)
    records = [json.loads(line) for line in (run.path / "records.jsonl").read_text().splitlines()]
    for r in records:
        for key, value in damage.items():
            r[key] = {**r[key], **value} if key == "client" else value
    (run.path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    data = cli.json("report", str(run.path))
    assert data["_exit"] == 0 and data["peak_connections"] == 2
    assert data["at_peak"]["vfio_interrupts_per_s"] is None and data["at_peak"]["client_threads_percent_of_one"] == {}


def test_records_that_are_not_utf8_name_the_line(cli, tmp_path: Path) -> None:
    run = a_run(tmp_path)
    with (run.path / "records.jsonl").open("ab") as f:
        f.write(b'{"kind": "note", "text": "\xff"}\n')
    assert_one_line_error(cli("report", str(run.path)), "records.jsonl line 19 is not UTF-8")


def test_a_torn_last_record_is_reported_once_and_the_rest_is_used(tmp_path: Path) -> None:
    run = a_run(tmp_path)

    def report() -> subprocess.CompletedProcess[str]:
        return forked_cli.call(["report", str(run.path), "--json"], timeout=120, text=True)

    whole = report()
    assert whole.returncode == 0 and whole.stderr == "", whole.stderr
    with (run.path / "records.jsonl").open("a") as f:
        f.write('{"kind": "measurement", "key": "a/8/0", "o')
    torn = report()
    assert (torn.returncode, torn.stdout) == (0, whole.stdout)
    warnings = torn.stderr.strip().splitlines()
    assert len(warnings) == 1 and f"{run.path}/records.jsonl line 19 is cut short" in warnings[0], torn.stderr


def test_appending_after_a_torn_line_cuts_it_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = a_run(tmp_path)
    with (run.path / "records.jsonl").open("a") as f:
        f.write('{"kind": "measurement", "key": "a/8/0", "o')
    with caplog.at_level(logging.WARNING, logger="vmharness.store"):
        run.append(record("a", 8, 0, 1.0))
    assert "torn line" in caplog.text
    keys = [r["key"] for r in RunDir.open(run.path).records()]
    assert len(keys) == 19 and keys[-1] == "a/8/0"


def test_an_unknown_baseline_is_an_error_not_a_warning(cli, tmp_path: Path) -> None:
    run = a_run(tmp_path)
    assert cli("report", str(run.path), "--baseline", "b", "--json")[0] == 0
    assert_one_line_error(cli("report", str(run.path), "--baseline", "zz"), "--baseline 'zz'", "a, b")
    assert_one_line_error(cli("report", str(run.path), "--baseline", ""), "--baseline ''")
    assert_one_line_error(cli("compare", str(run.path), "--baseline", "a"), "--baseline 'a'", "rd/a, rd/b")
    assert cli("compare", str(run.path), "--baseline", "rd/b", "--json")[0] == 0


def test_report_out_onto_a_file_or_a_folder_holding_a_fifo_is_refused(cli, tmp_path: Path) -> None:
    run = a_run(tmp_path)
    (tmp_path / "f").write_text("keep")
    assert_one_line_error(cli("report", str(run.path), "--out", str(tmp_path / "f")), "--out", "not a folder")
    assert (tmp_path / "f").read_text() == "keep"
    (tmp_path / "o").mkdir()
    os.mkfifo(tmp_path / "o" / "report.txt")
    assert_one_line_error(cli("report", str(run.path), "--out", str(tmp_path / "o")), "report.txt")
    assert_one_line_error(cli("compare", str(run.path), "--out", ""), "--out is empty")


# --- sysfs and procfs values ---------------------------------------------------------------------
@pytest.mark.parametrize(("attr", "value"), [("nr_hugepages", "lots"), ("free_hugepages", "-2"),
                                            ("nr_hugepages", "")])
def test_a_hugepage_count_that_is_not_one_names_the_file_and_value(host: FakeHost, attr: str, value: str) -> None:
    path = f"sys/devices/system/node/node0/hugepages/hugepages-2048kB/{attr}"
    host.write(path, value + "\n")
    with pytest.raises(HarnessError) as e:
        hugepages.per_node(HostRoot(host.base))
    assert f"/{path} holds {value!r}" in e.value.message


def test_host_prepare_on_garbage_hugepages_is_one_line(cli, tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "root", nodes=2, node_mib=1024)
    host.pci("0000:b3:00.0", driver="e1000e", group=40, numa=1, netdevs=("ens1f0",))
    host.write("sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "lots\n")
    assert_one_line_error(cli("host-prepare", "--host-root", str(host.base), "--dry-run", "--bdf", "b3:00.0",
                              "--hugepages", "1G"), "nr_hugepages holds 'lots'")


def test_a_node_meminfo_with_garbage_names_the_file(host: FakeHost) -> None:
    host.write("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:  many kB\n")
    with pytest.raises(HarnessError, match=r"node0/meminfo holds 'Node 0 MemTotal:  many kB': MemTotal"):
        hugepages.node_memory_kib(HostRoot(host.base), 0)


# --- the route guard fails closed ----------------------------------------------------------------
def routed_host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root")
    host.pci("0000:00:02.0", driver="e1000e", group=1, netdevs=("eth0",))
    host.pci("0000:00:03.0", driver="e1000e", group=2, netdevs=("eth1",))
    host.address("eth0", "198.18.0.1", 24)
    host.route("eth0", "0.0.0.0", "0.0.0.0", gateway="198.18.0.254")
    return host


def why(host: FakeHost, iface: str = "eth1") -> str | None:
    root = HostRoot(host.base)
    reason = verdict.in_use(root, iface, survey.reasons(root))
    return None if reason is None else str(reason)


def test_a_readable_host_lets_the_unused_nic_go(tmp_path: Path) -> None:
    host = routed_host(tmp_path)
    assert why(host) is None
    assert why(host, "eth0") is not None and "default route" in (why(host, "eth0") or "")


@pytest.mark.parametrize(("rel", "content", "fault"), [
    ("proc/net/route", None, "/proc/net/route cannot be read"),
    ("proc/net/route", "", "/proc/net/route is empty"),
    ("proc/net/route", "garbage\n", "/proc/net/route line 1 is garbled"),
    ("proc/net/route", "Iface\tDestination\neth9\tZZZZZZZZ\t0\t0\t0\t0\t0\tFFFFFFFF\n", "/proc/net/route line 2"),
    ("proc/net/route", "Iface\tDestination\neth9\t00000000\n", "/proc/net/route line 2"),
    ("proc/net/fib_trie", None, "/proc/net/fib_trie cannot be read"),
    ("proc/net/fib_trie", "Main:\n  |-- 300.1.2.3\n     /32 host LOCAL\n", "/proc/net/fib_trie line 2"),
    ("proc/net/ipv6_route", None, "/proc/net/ipv6_route cannot be read"),
    ("proc/net/ipv6_route", "zz 80 x\n", "/proc/net/ipv6_route line 1 is garbled"),
    ("proc/net/if_inet6", "fe80 02 40 20 80 eth1\n", "/proc/net/if_inet6 line 1 is garbled"),
    ("sys/devices/pci0000:00/0000:00:03.0/net/eth1/operstate", None, "eth1/operstate cannot be read"),
    ("sys/devices/pci0000:00/0000:00:03.0/net/eth1/operstate", "sideways\n", "eth1/operstate holds 'sideways'"),
])
def test_what_cannot_be_read_keeps_every_nic_in_use(tmp_path: Path, rel: str, content: str | None,
                                                    fault: str) -> None:
    host = routed_host(tmp_path)
    if content is None:
        (host.base / rel).unlink()
    else:
        (host.base / rel).write_text(content)
    reason = why(host)
    assert reason is not None and fault in reason, reason
    with pytest.raises(HarnessError) as e:
        plan.make(HostRoot(host.base), plan.Request(("0000:00:03.0",)))
    assert fault in e.value.message and "--force" in (e.value.hint or "")


def test_force_takes_a_nic_whose_use_cannot_be_told_with_a_warning(tmp_path: Path) -> None:
    host = routed_host(tmp_path)
    (host.base / "proc/net/route").unlink()
    p = plan.make(HostRoot(host.base), plan.Request(("0000:00:03.0",), force=True))
    assert any("/proc/net/route cannot be read" in w for w in p.warnings)


def test_a_kernel_without_ipv6_has_neither_ipv6_file_and_that_is_fine(tmp_path: Path) -> None:
    host = routed_host(tmp_path)
    (host.base / "proc/net/ipv6_route").unlink()
    (host.base / "proc/net/if_inet6").unlink()
    assert why(host) is None


def test_prepare_refuses_when_the_route_table_is_missing(cli, tmp_path: Path) -> None:
    host = routed_host(tmp_path)
    (host.base / "proc/net/route").unlink()
    assert_one_line_error(cli("host-prepare", "--host-root", str(host.base), "--dry-run", "--bdf", "00:03.0"),
                          "/proc/net/route cannot be read")
    data = cli.json("host-groups", "--host-root", str(host.base))
    assert "cannot be checked" in json.dumps(data)
