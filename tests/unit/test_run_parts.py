"""`vmharness run`'s pure parts: its configuration, the sessions a sweep becomes, provenance parsing,
and the partial undo that gives back only what a run took."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmharness.analysis import saturation
from vmharness.bench import at_peak, plan
from vmharness.errors import HarnessError
from vmharness.experiment import boots, runner
from vmharness.guest import instance, provenance, session
from vmharness.guest.domain import Placement
from vmharness.journal import journal, restore
from vmharness.model import config, derived, sections
from vmharness.rundir.store import RunDir
from vmharness.system.root import HostRoot


def test_the_embedded_experiment() -> None:
    cfg = config.load_run(None)
    # a small attribution study: the reference with pti forced on, each switch off in its own instance
    # (all-off with both), and the positive control
    assert [(i.name, i.cmdline, i.vcpu_cap) for i in cfg.instance] == [
        ("on", "pti=on", 0), ("no-pti", "pti=off", 0),
        ("no-spec_store_bypass_disable", "pti=on spec_store_bypass_disable=off", 0),
        ("all-off", "pti=off spec_store_bypass_disable=off", 0), ("control", "pti=on", 50)]
    assert cfg.control.cap == 50 and cfg.study.switches == ("pti", "spec_store_bypass_disable")
    # once spec_store_bypass_disable is found to change nothing, all-off is no-pti's: no-pti stands for it
    assert derived.stand_ins(cfg.study.switches, cfg.study.one_on, {"spec_store_bypass_disable"}, "on") == \
        {"all-off": "no-pti"}
    assert cfg.tuning.profile == "seeds" and cfg.guest.bdf == () and cfg.client[0].host == "local"
    assert derived.interleave(cfg) == "iteration"
    assert config.run_from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def test_run_sessions_follow_the_rotated_order() -> None:
    cfg = config.run_from_json({  # every instance swept, over five iterations
        "instance": [{"name": "baseline", "cmdline": "mitigations=off"}, {"name": "pti", "cmdline": "pti=on"}],
        "control": {"cap": 50}, "sweep": {"connections": "2,8,32", "iterations": 5}})
    assert [(s.iteration, s.instance) for s in boots.sessions(plan.points(cfg))] == [
        (0, "baseline"), (0, "pti"), (0, "control"), (1, "pti"), (1, "control"), (1, "baseline"),
        (2, "control"), (2, "baseline"), (2, "pti"), (3, "baseline"), (3, "pti"), (3, "control"),
        (4, "pti"), (4, "control"), (4, "baseline")]
    # the control rides on the baseline's boots: before or after the baseline's own points, as rotated
    assert boots.rides(cfg) == {"control": "baseline"}
    groups = boots.sessions(plan.points(cfg), boots.rides(cfg))
    assert [(s.iteration, s.instance) for s in groups] == [
        (0, "baseline"), (0, "pti"), (1, "pti"), (1, "baseline"), (2, "baseline"), (2, "pti"), (3, "baseline"),
        (3, "pti"), (4, "pti"), (4, "baseline")]
    assert [(p.instance, p.connections) for p in groups[0].points] == [
        ("baseline", 2), ("baseline", 8), ("baseline", 32), ("control", 2), ("control", 8), ("control", 32)]
    assert [p.instance for p in groups[3].points][:3] == ["control"] * 3
    assert boots.rides(sections.RunConfig()) == {}  # no control, no riders
    done = {"baseline/2/0", "baseline/8/0"}  # a resumed run boots only for what is missing
    left = boots.sessions([p for p in plan.points(cfg) if p.key not in done])
    assert left[0].instance == "baseline" and [p.key for p in left[0].points] == ["baseline/32/0"]


def _measured(keys: list[str], ok: bool = True) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for key in keys:
        name, count, it = key.split("/")
        out.append({"kind": "measurement", "key": key, "instance": name, "connections": int(count),
                    "iteration": int(it), "ok": ok, "client": {"requests_per_s": 1000.0 + int(count)}})
    return out


def test_only_the_baseline_sweeps_and_the_others_follow_at_the_peak_its_first_boot_fixed() -> None:
    cfg = config.load_run(None)  # the embedded experiment: sweep.variants = "peak"
    assert cfg.sweep.variants == "peak" and cfg.sweep.iterations == 4 and cfg.counts == (2, 8, 32)
    # before the peak is fixed: the reference's first boot alone, its control riding without points yet
    first = plan.todo(cfg, [], set())
    assert [p.key for p in first] == ["on/2/0", "on/8/0", "on/32/0"]
    assert [(s.iteration, s.instance) for s in boots.sessions(first, boots.rides(cfg))] == [(0, "on")]
    records: list[dict[str, object]] = [*_measured([p.key for p in first])]
    assert at_peak.after_sweep(cfg, records, 0) == []  # nothing at a peak not yet written
    records.append(at_peak.new_target(cfg, records) or {})
    assert records[-1]["connections"] == 32  # the highest of the first boot's three
    # that boot's riders are measured there once its sweep is done: the control, before the load
    after = [p for p in at_peak.after_sweep(cfg, records, 0) if p.instance in ("on", "control")]
    assert [p.key for p in after][:2] == ["control/32/0", "on/@25%/0"]
    records += _measured(["control/32/0"])
    # then every other boot, rotated: the reference over every count, the study's variants and the control
    # at 32 alone (the runner skips those a study dropped since the round began)
    rest, why = plan.after_round(cfg, records)
    assert why is None
    groups = boots.sessions(rest, boots.rides(cfg))
    ssbd = "no-spec_store_bypass_disable"
    assert [(s.iteration, s.instance) for s in groups] == [
        (0, "no-pti"), (0, ssbd), (0, "all-off"), (1, "no-pti"), (1, ssbd), (1, "all-off"), (1, "on"),
        (2, ssbd), (2, "all-off"), (2, "on"), (2, "no-pti"), (3, "all-off"), (3, "on"), (3, "no-pti"), (3, ssbd)]
    assert [p.key for p in groups[0].points] == ["no-pti/32/0"]
    assert [p.key for p in groups[6].points] == ["control/32/1", "on/2/1", "on/8/1", "on/32/1"]
    assert {p.connections for p in rest if p.instance != "on"} == {32}
    # a point tried and failed is not offered again by the round (the run's last offer takes it)
    tried = records + _measured(["no-pti/32/0"], ok=False)
    assert "no-pti/32/0" not in {p.key for p in plan.after_round(cfg, tried)[0]}
    # sweep, the others at the peak, load (not the control), counted, profiled: before any switch is dropped
    assert plan.planned(cfg) == 4 * 3 + 4 * 4 + 4 * 4 * 3 + 4 * 5 + 5


def test_without_a_successful_first_boot_the_baseline_boots_again_before_the_others() -> None:
    cfg = config.load_run(None)
    failed = _measured(["on/2/0", "on/8/0", "on/32/0"], ok=False)
    assert at_peak.new_target(cfg, failed) is None
    nxt, _ = plan.after_round(cfg, failed)
    assert [p.key for p in nxt] == ["on/2/1", "on/8/1", "on/32/1"]


def test_sweep_pipeline_twins_every_instance_and_the_twins_ride_on_its_boots(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[[instance]]\nname = "base"\ncmdline = "mitigations=off"\n'
                    '[[instance]]\nname = "pti"\ncmdline = "pti=on"\n'
                    '[control]\ncap = 50\n[sweep]\nconnections = "2,8"\niterations = 2\npipeline = [1, 16]\n')
    cfg = config.load_run(path)
    assert [(i.name, i.cmdline, i.pipeline, i.vcpu_cap) for i in cfg.instance] == [
        ("base", "mitigations=off", 1, 0), ("pti", "pti=on", 1, 0), ("base-p16", "mitigations=off", 16, 0),
        ("pti-p16", "pti=on", 16, 0), ("control", "mitigations=off", 1, 50)]  # the control has no twin
    assert config.run_from_json(json.loads(json.dumps(cfg.to_json()))) == cfg  # a resumed run: as it was
    assert boots.rides(cfg) == {"base-p16": "base", "pti-p16": "pti", "control": "base"}
    groups = boots.sessions(plan.points(cfg), boots.rides(cfg))
    assert [(s.iteration, s.instance) for s in groups] == [(0, "base"), (0, "pti"), (1, "pti"), (1, "base")]
    assert {p.instance for p in groups[0].points} == {"base", "base-p16", "control"}
    assert derived.loaded(cfg) == ["base", "pti"]  # oha does not pipeline
    bench_cfg = tmp_path / "b.toml"
    bench_cfg.write_text('[[instance]]\nname = "a"\n[sweep]\npipeline = [4, 1]\n')
    assert [(i.name, i.pipeline) for i in config.load(bench_cfg).instance] == [("a", 4), ("a-p1", 1)]


def test_instances_alike_but_for_a_live_setting_ride_and_alike_in_all_boot_apart() -> None:
    a = sections.InstanceSection("a", cmdline="x")
    cfg = sections.RunConfig(instance=(a, sections.InstanceSection("a-capped", cmdline="x", vcpu_cap=80),
                                     sections.InstanceSection("a-again", cmdline="x"),
                                     sections.InstanceSection("b", cmdline="y", pipeline=8)))
    assert boots.rides(cfg) == {"a-capped": "a"}  # an A/A pair boots apart; b's guest is its own


def test_sweep_pipeline_errors_name_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    cases = {
        "[sweep]\npipeline = [1, 16, 1]\n": "sweep.pipeline: [1, 16, 1] names a depth twice",
        "[sweep]\npipeline = [0]\n": "sweep.pipeline",
        "[sweep]\npipeline = [1, 2000]\n": "sweep.pipeline",
        "[sweep]\npipeline = []\n": "sweep.pipeline is empty",
        '[[instance]]\nname = "a"\npipeline = 4\n[sweep]\npipeline = [1, 8]\n': "instance a: pipeline = 4",
        '[[instance]]\nname = "a"\n[[instance]]\nname = "a-p8"\ncmdline = "z"\n[sweep]\npipeline = [1, 8]\n':
            "an instance is already named 'a-p8'",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(HarnessError) as err:
            config.load_run(path)
        assert message in err.value.message, (text, err.value.message)


def test_run_config_errors_name_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    cases = {
        "[guest]\nmemory = 64\n": "guest.memory must be between 128 and",
        "[guest]\naddress = \"198.19.0.2/24\"\nclient_address = \"198.19.1.1/24\"\n":
            "guest.address 198.19.0.2/24 and guest.client_address 198.19.1.1/24 are not on one network",
        "[guest]\nclient_address = \"198.19.0.0/24\"\n": "guest.client_address '198.19.0.0/24' is not an IPv4",
        "[guest]\nbdf = [\"b3:00.9\"]\naddress = \"198.19.0.2/24\"\n": "guest.bdf[0] 'b3:00.9' is not a PCI address",
        "[guest]\nbdf = [\"0000:b3:00.0\"]\naddress = \"198.19.0.300/24\"\n": "is not an IPv4 address",
        "[guest]\ninit = \"openrc\"\n": "guest.init must be systemd or minimal",
        "[server]\nurl = \"http://10.0.0.1/\"\n": "server.url is chosen by run",
        "[guest]\nimage = \"/nonexistent\"\n": "guest.image: no such folder /nonexistent",
        "[[instance]]\nname = \"a\"\nkernel = \"/nonexistent/bzImage\"\n": "instance a: kernel: no such file",
        "[[instance]]\nname = \"a\"\n[[instance]]\nname = \"b\"\n[sweep]\ninterleave = \"point\"\n":
            "sweep.interleave = point cannot be",
        "[guests]\nmemory = 512\n": "unknown setting config.guests",
        "[[instance]]\nname = \"a\"\ncpu_features = [\"md-clear\"]\n": "cpu_features[0] 'md-clear' is not +name",
        "[[instance]]\nname = \"a\"\nqemu_args = [\"-global\", \"\"]\n":
            "instance[0].qemu_args[1] is an empty argument",
        "[[instance]]\nname = \"a\"\nprofile = \"/nonexistent.toml\"\n": "no profile '/nonexistent.toml'",
        "[tuning]\nprofile = \"fast\"\n": "no profile 'fast'",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(HarnessError) as err:
            config.load_run(path)
        assert message in err.value.message, (text, err.value.message)


def test_bench_refuses_a_guests_settings(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text("[[instance]]\nname = \"a\"\ncmdline = \"mitigations=off\"\n")
    with pytest.raises(HarnessError, match="instance a: cmdline is a guest's setting"):
        config.load(path)
    path.write_text("[[instance]]\nname = \"a\"\nqemu_args = [\"-global\", \"ICH9-LPC.noreboot=off\"]\n")
    with pytest.raises(HarnessError, match="instance a: qemu_args is a guest's setting"):
        config.load(path)
    path.write_text("[[instance]]\nname = \"a\"\nvcpu_cap = 50\n")
    with pytest.raises(HarnessError, match="instance a: vcpu_cap is a guest's setting"):
        config.load(path)


def test_an_instance_brings_its_own_cpu_qemu_arguments_and_profile(tmp_path: Path) -> None:
    prof = tmp_path / "wide.toml"
    prof.write_text('base = "seeds"\n[sysctl]\n"net.core.somaxconn" = 4096\n')
    path = tmp_path / "r.toml"
    path.write_text(f'[[instance]]\nname = "a"\ncpu_features = ["-md-clear", "+pcid"]\n'
                    f'qemu_args = ["-global", "ICH9-LPC.noreboot=off"]\nprofile = "{prof}"\n')
    cfg = config.load_run(path)
    req = session.request(cfg, cfg.instance[0], "run:0123456789")
    assert (req.cpu_features, req.qemu_args) == (("-md-clear", "+pcid"), ("-global", "ICH9-LPC.noreboot=off"))
    assert cfg.instance[0].profile == str(prof)


FACTS = """@version
Linux version 6.1.0-50-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0) #1 SMP
@cmdline
root=/dev/vda rw mitigations=off
@online
0-1,4
@clocksource
tsc
@os
Debian GNU/Linux 12 (bookworm)
@cpuinfo
model name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz
microcode\t: 0x5003604
flags\t\t: fpu vme md_clear pcid
@dmi
Dell Inc. PowerEdge R740
@meminfo
MemTotal:        1004512 kB
HugePages_Total:       0
HugePages_Free:        0
Hugepagesize:       2048 kB
@nodes
/sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages:510
/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages:512
/sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages:0
@vulnerabilities
meltdown:Not affected
spectre_v2:Vulnerable; STIBP: disabled
@nic eth0
driver: virtio_net
version: 1.0.0
firmware-version: 1.2
bus-info: 0000:00:03.0
@bootlog
[    0.000000] Command line: root=/dev/vda rw mitigations=off
[    0.012345] Kernel/User page tables isolation: enabled
[    0.020000] Spectre V2 : Mitigation: Retpolines
@qemu
"""


def test_provenance_parses_its_script_output() -> None:
    got = provenance.parse(FACTS)
    assert got["kernel"] == "6.1.0-50-amd64" and got["cpus"] == 3 and got["microcode"] == "0x5003604"
    assert got["cpu_model"] == "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz" and got["memory"] == "1004512 kB"
    assert got["vulnerabilities"] == {"meltdown": "Not affected", "spectre_v2": "Vulnerable; STIBP: disabled"}
    assert got["cpu_flags"] == ["fpu", "md_clear", "pcid", "vme"] and got["machine"] == "Dell Inc. PowerEdge R740"
    assert got["hugepages_by_node"] == {"node1": {"2048kB": {"free": 510, "nr": 512}},
                                        "node0": {"1048576kB": {"nr": 0}}}
    assert got["nics"]["eth0"]["driver"] == "virtio_net" and got["nics"]["eth0"]["bus-info"] == "0000:00:03.0"
    assert got["hugepages"]["Hugepagesize"] == "2048 kB" and got["qemu"] == ""
    assert got["mitigation_log"] == ["Kernel/User page tables isolation: enabled",
                                     "Spectre V2 : Mitigation: Retpolines"]


def test_a_partial_undo_gives_back_only_the_selected_records(tmp_path: Path) -> None:
    root = HostRoot(tmp_path, allow_writes=True)
    (tmp_path / "x").write_text("old")
    mine = journal.record(root, {"op": "file", "path": "/tmp/vmharness-report-nonexistent-1.lua", "ssh": None}, "r1")
    other = journal.record(root, {"op": "file", "path": "/tmp/vmharness-report-nonexistent-2.lua", "ssh": None}, "r2")
    said: list[str] = []
    assert restore.undo(root, said.append, only=lambda r: r.get("owner") == "r1") == []
    assert said == ["undone: remove /tmp/vmharness-report-nonexistent-1.lua"]
    assert [r["seq"] for r in restore.pending(root)] == [other["seq"]]
    assert mine["seq"] not in [r["seq"] for r in restore.pending(root)]
    journal.record(root, {"op": "begin", "pid": 1})  # a marker: nothing to undo, never blocks the clean-up
    journal.release(root, [other["seq"]])
    assert not (tmp_path / "run/vmharness/journal.jsonl").exists()


def test_pinning_is_checked_thread_by_thread() -> None:
    plan = Placement(1, (17, 18), (16,))
    held = session.pinning(plan, {"emulator": "16", "CPU 1/KVM": "18", "CPU 0/KVM": "17", "worker": "0-31"})
    assert held == {"ok": True, "vcpus": ["17", "18"], "emulator": "16", "planned_vcpus": [17, 18],
                    "planned_emulator": [16]}
    assert session.pinning(plan, {"emulator": "16", "CPU 0/KVM": "17-18", "CPU 1/KVM": "18"})["ok"] is False
    assert session.pinning(plan, {"emulator": "0-31", "CPU 0/KVM": "17", "CPU 1/KVM": "18"})["ok"] is False
    assert session.pinning(plan, {"emulator": "16", "CPU 0/KVM": "17"})["ok"] is False  # a vCPU thread missing
    assert session.pinning(plan, {})["ok"] is None  # QEMU's process not found: not known


def test_failed_sessions_and_a_shared_host_are_warnings(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", {"config": {"instance": [{"name": "base"}, {"name": "mit"}]},
                                           "machines": {"server": {"machine": "guest"},
                                                        "clients": [{"machine": "local"}]},
                                           "guest": {"kvm": False, "shares_host_with_client": True}})
    for it, rps in enumerate((100.0, 102.0, 98.0)):
        run.append({"kind": "measurement", "key": f"base/8/{it}", "ok": True, "instance": "base", "connections": 8,
                    "iteration": it, "client": {"requests_per_s": rps, "requests": 1000, "errors": {"total": 0},
                                                "latency_us": {"percentiles": dict.fromkeys(("50", "90", "99", "99.9"),
                                                                                            50.0)}}})
    run.append({"kind": "session", "instance": "mit", "iteration": 0, "ok": False,
                "error": "the guest did not boot: the guest kernel panicked while booting"})
    loose = session.pinning(Placement(0, (1,), (0,)), {"emulator": "0-1", "CPU 0/TCG": "0-1"})
    run.append({"kind": "session", "instance": "base", "iteration": 1, "ok": True, "pinning": loose})
    run.append({"kind": "measurement", "key": "mit/8/0", "instance": "mit", "connections": 8, "iteration": 0,
                "ok": False, "attempts": 0, "error": "the guest did not boot"})
    a = saturation.analyse(run)
    assert a.flags[0] == "mit iteration 0 measured nothing: the guest did not boot: the guest kernel panicked " \
                         "while booting"
    assert a.flags[1] == "not pinned: base iteration 1's vCPU threads ran on CPUs ['0-1'] and its emulator on " \
                         "'0-1', planned [1] and [0]"
    assert "1 points failed after their retries: see records.jsonl" in a.flags
    assert "the guest runs on a client's machine: wrk and the guest's vCPUs share its CPUs" in a.flags
    assert "no KVM: the guest ran under TCG; these are not hardware numbers" in a.flags
    assert a.peak == 8 and a.changes == {}


def test_a_local_wrk_is_kept_off_the_guests_vcpus(tmp_path: Path) -> None:
    from tests.fakehost import FakeHost
    from vmharness.bench import clients, wrk
    from vmharness.system.machine import Machine

    run = wrk.WrkRun("http://198.18.1.2:8080/", 8, 1, 5, 10, "/tmp/r.lua")
    pinned = clients.Client(Machine(), pin=(0, 2))
    assert pinned.command(run)[:4] == ["taskset", "--cpu-list", "0,2", "wrk"]
    assert clients.Client(Machine()).command(run)[0] == "wrk"
    host = FakeHost(tmp_path)
    host.write("/sys/devices/system/cpu/online", "0-3\n")
    r = runner.Runner(config.load_run(None), None, HostRoot(host.base), lambda _: None)  # type: ignore[arg-type]

    def booted(vcpus: list[int]) -> session.Booted:
        return session.Booted(None, None, "", "", {}, "", {"planned_vcpus": vcpus}, None)  # type: ignore[arg-type]

    assert r._off_vcpus(booted([1, 2])) == (0, 3)
    assert r._off_vcpus(booted([0, 1, 2, 3])) == ()  # no CPU left over: wrk goes where the scheduler puts it


def test_the_control_flags_help_names_the_cap_it_sets(capsys: pytest.CaptureFixture[str]) -> None:
    from vmharness.cli import main as cli

    assert cli.main(["run", "--help"]) == 0
    assert f"capped to {sections.CONTROL_CAP}% of a CPU" in " ".join(capsys.readouterr().out.split())


def test_an_instances_own_init_wins_over_the_minimal_init() -> None:
    cfg = config.run_from_json({"instance": [{"name": "a", "cmdline": "mitigations=off init=/bin/false"}]})
    assert cfg.guest.init == "minimal"
    req = session.request(cfg, cfg.instance[0], "run:0123456789")
    assert req.cmdline == f"{instance.MINIMAL_INIT} mitigations=off init=/bin/false"  # the kernel takes the last init=
    systemd = config.run_from_json({"guest": {"init": "systemd"}, "instance": [{"name": "a", "cmdline": "quiet"}]})
    assert session.request(systemd, systemd.instance[0], "run:0123456789").cmdline == "quiet"
