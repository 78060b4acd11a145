"""`vmharness run` for real: the embedded experiment end to end (image, guests under libvirt with
TCG, tuning, nginx in the guest loaded by wrk here over the guest's link, the report), a guest that
does not boot, and a run killed mid-way then resumed. Nothing may be left: no domain, no overlay, no
journal, every tuned value back."""

from __future__ import annotations

import json
import math
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from vmharness.analysis import profiles
from vmharness.analysis.variants import WAIT_LIMIT
from vmharness.bench import syscalls
from vmharness.system import proc

pytestmark = [pytest.mark.integration, pytest.mark.vm]

JOURNAL = Path("/run/vmharness/journal.jsonl")
# For a run whose test reads no figure: matplotlib draws each in three formats, 4 s of a one-point run
# here and more beside the rig, while the built-in experiment and the study draw and check theirs
FIGURES_OFF = "[report]\nfigures = false\n"
HOST_KNOBS = ("/proc/sys/net/core/somaxconn", "/proc/sys/net/ipv4/ip_local_port_range",
              "/proc/sys/net/ipv4/tcp_tw_reuse", "/sys/kernel/mm/transparent_hugepage/enabled")


def vmh(*args: str, timeout: float = 1800) -> proc.Result:
    return proc.run([sys.executable, "-m", "vmharness.cli", *args], timeout=timeout, check=False)


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]


def host_knobs() -> dict[str, str]:
    return {p: Path(p).read_text() for p in HOST_KNOBS}


def assert_nothing_left() -> None:
    names = proc.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], timeout=30).stdout.split()
    assert not [n for n in names if n.startswith("vmh-r")]  # a run's guests are vmh-rRUNID
    assert not Path("/var/lib/vmharness/vms/_run/overlay.qcow2").exists()
    assert not JOURNAL.exists(), JOURNAL.read_text()


def cannot_judge(warnings: list[str]) -> bool:
    """The report's warnings that the run could not see a cost: its throughput was held by the client or
    by the host's other work, not by the guest's server alone (analysis/sides.py, analysis/flags.py), or
    its peak's interval was too wide to tell one (flags.py's "noisy": beside the rig a run read pti at
    -34% [-66%, +28%], its peak's interval ±54%, with neither of the others said)."""
    return any(w.startswith(("client-bound: ", "noisy: ")) or "for a host CPU other work held" in w
               for w in warnings)



# Run beside the rig's stream (CI's two cores), as its landed runs were: the machine to itself would hold
# the host's stream until the rig's ended, and cost the suite the experiment's minutes again. What the
# contention changes is what it asserts with care: the control's verdict (expected from the run's own
# vCPU shares, test_contention.py), the system calls (counted by difference, bench/syscalls.py).
def test_the_embedded_experiment(daemon: None, tmp_path: Path) -> None:
    """A small attribution study: the reference `on` (the kernel's mitigations, pti forced on), no-pti,
    no-spec_store_bypass_disable (which changes nothing under TCG: dropped at its first boot, and all-off
    with it, which no-pti then stands for), and the positive control riding on the reference's boots."""
    before = host_knobs()
    run = tmp_path / "demo"
    started = time.monotonic()
    res = vmh("run", "--out", str(run))
    print(res.stderr[-3000:], res.stdout, f"run took {time.monotonic() - started:.0f} s", sep="\n")
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout
    got = records(run)
    points = [r for r in got if r["kind"] == "measurement"]
    # only the reference sweeps (2, 8 and 32 connections, four boots); no-pti and the control are measured at
    # the count where its first boot peaked
    assert len(points) == 4 * 3 + 4 + 4 and all(r["ok"] for r in points)
    assert all(r["client"]["requests"] > 0 and r["client"]["errors"]["total"] == 0 for r in points)
    # nginx's tree in the guest; beside the rig a guest's sampler once had one snapshot in a point's window
    # (the control's first at 2 connections), which the point says: accepted for a few points, said
    unsampled = [r["key"] for r in points if "process" not in r["samples"]["guest"]]
    print("points whose guest sampler had too few snapshots:", unsampled)
    assert all(r["samples"]["guest"]["note"].startswith("fewer than two samples in the window")
               for r in points if r["key"] in unsampled) and len(unsampled) <= 2, unsampled
    assert all(r["samples"]["guest"]["process"]["pids_last"] >= 2 for r in points if r["key"] not in unsampled)
    sessions = [r for r in got if r["kind"] == "session"]
    # the control rides on the reference's boots (capped live): eight boots for three instances measured, and
    # no-spec_store_bypass_disable's one boot, which measured nothing: its guest reported what on's did, and
    # all-off (pti and it off) was then no-pti in all but that, dropped with it and never booted
    dropped = [(r["instance"], r["iteration"]) for r in got if r["kind"] == "dropped"]
    assert dropped == [("no-spec_store_bypass_disable", 0), ("all-off", 0)], dropped
    assert "all-off dropped before it is measured: it differs from no-pti only in switches" in res.stderr
    # a point at the peak that failed (a counted, profiled or open-loop one) is offered once more after the
    # sweep, in a boot of its own (runner.py): in the CI run of f107223 no-pti's iteration 2 came back as a
    # ninth session (the tail of the log kept did not say which of its points had failed). Such a boot is
    # accepted only for a failure on record, which is printed, and only after the eight the rotation plans
    failed = [r for r in got if r["kind"] in ("syscalls", "profile", "load") and not r["ok"]]
    print("points that failed:", [(r["kind"], r["instance"], r["iteration"], r.get("error")) for r in failed])
    assert [(s["instance"], s["iteration"], s["riders"]) for s in sessions[:8]] == [
        ("on", 0, ["control"]), ("no-pti", 0, []), ("no-pti", 1, []), ("on", 1, ["control"]),
        ("on", 2, ["control"]), ("no-pti", 2, []), ("on", 3, ["control"]), ("no-pti", 3, [])], sessions
    assert all((s["instance"], s["iteration"]) in {(r["instance"], r["iteration"]) for r in failed}
               for s in sessions[8:]), (sessions[8:], failed)
    assert res.stderr.count("all-off, iteration") == 0 and res.stderr.count("no-spec_store_bypass_disable, it") == 1
    for s in sessions:
        words = s["cmdline"].split()  # the image's, the minimal init's init=, then the instance's
        assert s["ok"] and words[-1] == ("pti=on" if s["instance"] == "on" else "pti=off")
        assert "init=/usr/local/sbin/vmh-init" in words
        assert s["tuning"][0]["machine"] == "guest" and s["tuning"][0]["changes"]
        assert s["pinning"]["ok"] is True and s["pinning"]["vcpus"] == [str(c) for c in s["pinning"]["planned_vcpus"]]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["ended"] and manifest["guest"]["kvm"] is False
    assert manifest["host"]["libvirt"].startswith("9.") and manifest["host"]["qemu"].startswith("QEMU emulator")
    assert manifest["host"]["vulnerabilities"] and manifest["host"]["cpu_model"]
    for name in ("on", "no-pti", "control"):
        facts = manifest["instances"][name]
        assert facts["kernel"] and facts["vulnerabilities"] and "eth0" in facts["nics"]
        assert "rdrand" in facts["cpu_flags"] and facts["machine"].startswith("QEMU Standard PC (Q35")
    # what pti=on did is seen in the guest: the kernel's flag and its boot line, not the vulnerabilities files
    flags = {name: manifest["instances"][name]["cpu_flags"] for name in ("on", "no-pti")}
    assert "pti" in flags["on"] and "pti" not in flags["no-pti"]
    assert any("isolation: enabled" in line for line in manifest["instances"]["on"]["mitigation_log"])
    # the host saw the cap bind: the control's vCPU thread ran at most 50% of the time, the reference's more,
    # or else the reference's was held under the cap too, by the host's other work, which it waited for: a
    # loaded machine (load 5-6 on two cores) read both shares near 30%, their order left to chance, and that
    # is said by the time the reference's vCPU waited for its CPU (schedstat), not guessed
    vcpu = {name: [p["host"]["vcpu_busy_percent"][0] for p in points if p["instance"] == name]
            for name in ("on", "control")}
    waited = statistics.fmean(p["host"]["vcpu_wait_percent"][0] for p in points if p["instance"] == "on")
    ran = {name: statistics.fmean(shares) for name, shares in vcpu.items()}
    assert max(vcpu["control"]) <= 52, vcpu
    assert ran["on"] > ran["control"] or (ran["on"] < 52 and ran["on"] + waited > 52), (vcpu, waited)
    # and how long each waited for its CPU (the kernel's schedstat for QEMU's "CPU 0/TCG" thread)
    assert all(0 <= p["host"]["vcpu_wait_percent"][0] <= 101 for p in points), points[0]
    # and QEMU's own threads beside the vCPU: under load its main loop emulates the guest's NIC and disk,
    # so some CPU, and at most what the process's other threads can hold on the two cores
    assert all(0 < p["host"]["qemu_other_percent"] <= 200 for p in points), points[0]["host"]
    assert "QEMU's other threads" in (run / "report" / "report.txt").read_text()
    # each reference boot read its vCPU's time without load first (timers, samplers): more than nothing,
    # less than it wanted under load: ran or waited for its CPU (beside the rig's L1 booting, a clean clone's
    # first baseline boot ran 27% of the time under load, waiting 59%, after 31% without load)
    idle = [r for r in got if r["kind"] == "idle"]
    assert [(r["instance"], r["iteration"]) for r in idle] == [(s["instance"], s["iteration"]) for s in sessions
                                                               if s["instance"] == "on"]
    wanted = min(p["host"]["vcpu_busy_percent"][0] + p["host"]["vcpu_wait_percent"][0] for p in points
                 if p["instance"] == "on")
    assert all(0 < r["vcpu_busy_percent"][0] < wanted for r in idle), (wanted, idle)
    assert manifest["host"]["hugepages_by_node"]["node0"]
    assert {t["machine"] for t in manifest["tuning"]} == {"host"}
    report = json.loads((run / "report" / "report.json").read_text())
    # the demo finds something: page-table isolation costs throughput, read as the reference against no-pti
    # paired by boot (pti -46.3% [-48.6%, -43.9%] against mitigations=off in an earlier README's run). Beside
    # the rig's stream, whose L1 may hold the CPU that wrk and the guest share, a clean clone read -31%
    # [-84%, +204%], the run warning first that its client was 97% busy: the cost is found, or the run says
    # why it could not be (and, below, does not explain it)
    study = report["attribution"]
    assert study["switches"] == ["pti"], study
    assert study["left_out"] == {"spec_store_bypass_disable": "dropped before it was measured: its guest "
                                                              "reported the same mitigations"}
    pti = study["by_metric"]["throughput"]["marginals"][0]
    found = pti["holm_rejects"] and pti["change"]["high"] < 0
    print("pti:", pti, "warnings:", report["warnings"])
    assert pti["switch"] == "pti" and pti["change"]["change"] < 0 and (found or cannot_judge(report["warnings"]))
    gain = report["changes_at_peak"]["no-pti"]["throughput"]
    assert gain["change"] > 0 and gain["change"] == pytest.approx(1 / (1 + pti["change"]["change"]) - 1), gain
    # no-pti stands for all-off: the total is pti's cost, and nothing is left to interact
    total = study["by_metric"]["throughput"]["total"]
    assert total["change"] == pytest.approx(pti["change"]["change"])
    assert [s["step"] for s in study["waterfall"]] == ["pti"]
    assert (run / "report" / "attribution.svg").exists()
    text = (run / "report" / "report.txt").read_text()
    assert "attribution at" in text and "spec_store_bypass_disable: left out: dropped" in text
    assert "may have done nothing" not in text  # the dropped switch is said once, in the study's answer
    assert report["peak_connections"] in (2, 8, 32) and {"no-pti", "control"} == set(report["changes_at_peak"])
    fixed = next(r["connections"] for r in got if r["kind"] == "load_target")
    assert report["peak_connections"] == fixed and {r["connections"] for r in points if r["instance"] != "on"} \
        == {fixed}
    assert "no KVM: the guest ran under TCG; these are not hardware numbers" in report["warnings"]
    # no VM exits to count under TCG, one line says so; the vCPU time per request is there: the reference's higher
    per_request = {n: v["vcpu_cpu_us_per_request"] for n, v in report["vm_exits"]["instances"].items()}
    assert "ran under TCG" in report["vm_exits"]["note"] and per_request["on"] > per_request["no-pti"] > 0
    assert "VM exits per request: not available: the guests ran under TCG" in text
    # the guest's kernel events per request at the peak, from its sampler's stream, paired against the reference
    events = report["kernel_events"]
    assert {"on", "no-pti", "control"} <= set(events), events
    # the uncapped instances switch and take interrupts well above what their guest does without load (a
    # CI run's: 580-680 context switches a second against 281); an event a point had no more of than the
    # idle reading has no figure for its instance, and is named (a CI run's capped control: 240 against 281,
    # once read as 0 per request)
    assert all(events[n]["per_request"]["context switches"] > 0 and events[n]["per_request"]["interrupts"] > 0
               for n in ("on", "no-pti")), events
    assert all((e["per_request"].get(k, 0) > 0) != (k in e["under_idle"]) for e in events.values()
               for k in ("context switches", "interrupts")), events
    assert "context switches" in events["no-pti"]["changes"] and not events["on"]["changes"]
    assert "kernel events per request on the server at the peak" in text
    # why, from one more point per instance and boot with the server's system calls counted: the reference
    # makes no-pti's calls, each dearer, and its work per request predicts pti's cost; the control makes the
    # same calls with no more work per request: its cost lies outside the guest (the negative control)
    counted = [r for r in got if r["kind"] == "syscalls" and r["ok"]]
    assert len(counted) == 12 and all(r["connections"] == report["load"]["connections"] for r in counted)
    calls = report["syscalls"]["instances"]
    # a point whose load served no more requests than its connections beyond the shorter load's says nothing
    # and is left out, said (under TCG pti's counted load once served fewer requests in 3 s than in the 1 s
    # before it, its rate down to a third; a clean clone's no-pti 1,509 after 1,503, and read 3.3 calls)
    assert set(calls) == {"on", "no-pti", "control"} and all(c["boots"] >= 2 for c in calls.values())
    left = report["syscalls"]["left_out"]
    assert sum(c["boots"] for c in calls.values()) + left == 12
    assert not left or "counted point(s) left out" in text
    # counted by the difference of two loads, each call nginx makes per keep-alive request comes out whole
    # (7.01 in a clean clone's run: newfstatat 2, close, openat, pread64, recvfrom and writev 1 each; over
    # one whole load, before, the answers wrk no longer waited for and each connection's close added
    # fractions to several, most where fewest requests were served: the capped control read 17% more)
    assert 3 < calls["on"]["per_request"] < 30 and calls["on"]["top"], calls
    assert all(x >= 0.9 and abs(x - round(x)) < 0.1 for x in calls["on"]["top"].values()), calls
    # no-pti and the control make the reference's calls by the report's own rule (syscalls.same_calls): a
    # change told from none, or within 5%. A point figure alone was asked to be within 5% before, and a CI
    # run beside the rig read the control's +5.9% over four boots, its interval reaching +32%: noise, not a change
    assert all(calls[n]["same_calls"] is True for n in ("no-pti", "control")), calls
    # every boot is read for its clocksource before and after its points; a counted point whose server read
    # the time by system calls (its guest left the TSC: that CI run's on and control, which share a boot,
    # read clock_gettime 0.5 and 1.9 per request in boot 2 and none elsewhere) comes with the warning that
    # names its boot
    clocks = [r for r in got if r["kind"] == "clock"]
    assert {r["instance"] for r in clocks} == {"on", "no-pti"} and all(r["at_start"] for r in clocks), clocks
    by_time = [r["iteration"] for r in counted if (syscalls.per_request(r) or (0, {}))[1].get("clock_gettime", 0) > 0.2]
    assert all(any(f"iteration {it}: the guest's clocksource went from" in w for w in report["warnings"])
               for it in by_time), (by_time, clocks)
    why = study["why"]
    explained = why.get("pti", {}).get("verdict") == "each call costs more, which explains the cost"
    assert (not found or explained) and set(why) <= {"pti"}, why
    assert found == ("\n  pti (on against no-pti): the same system calls per request (" in text)
    # why, from one more point per instance with the server's CPUs profiled by perf: pti's time grew in the
    # function that enables interrupts after the system call entry's switch of page tables (under TCG the
    # switch's cost lands there), read as the reference's profile against no-pti's; the control, whose
    # cost is outside the guest, grows nothing in its kernel. One per instance; a profiled point that
    # failed (perf in a guest held off its CPU) again in a later boot
    profiled = [r for r in got if r["kind"] == "profile" and r["ok"]]
    assert sorted(r["instance"] for r in profiled) == ["control", "no-pti", "on"], profiled
    assert all(any(p["instance"] == r["instance"] and p["iteration"] > r["iteration"] for p in profiled)
               for r in got if r["kind"] == "profile" and not r["ok"])
    assert all((run / r["profile"]["file"]).stat().st_size == r["profile"]["bytes"] for r in profiled)
    prof = report["profiles"]
    # the control's kernel grows nothing, or (a machine loaded beside the run) the report warns that the
    # profiles cannot tell a cost from noise, naming what grew: never a silent false explanation
    grown = prof["control"]["kernel_growers"]
    print("control's kernel growers:", grown)
    assert prof["control"]["instance"] == "control" and (not grown or any(
        w.startswith(f"control: {grown[0]}") and "cannot tell" in w for w in report["warnings"])), prof
    # pti's time grew in that function (its share of the server's work up by a point, Fisher p < 0.001), or
    # else at least rose, or that negative control failed and the report said so. Beside the rig, clean
    # clones' pti grew nothing while the control's kernel grew _raw_spin_unlock_irqrestore; and the
    # function's share rose 1.1% -> 2.2% over 1,370 work samples, too few for p < 0.001
    pti_grew = "syscall_enter_from_user_mode" in [g["function"] for g in (why.get("pti", {}).get("growers") or [])]
    read = profiles.view(got, "on", run)  # the report's own reading of the folded profiles
    assert read is not None
    share = {p.instance: sum(ns for leaf, ns in p.leaves.items() if leaf.startswith("syscall_enter_from_user_mode"))
             / sum(p.work.values()) for p in read.profiles}
    assert pti_grew or grown or share["on"] > share["no-pti"], (why, share)
    # (among what grew most: a quiet clean run here put finish_task_switch first, the scheduler's share
    # under TCG, and syscall_enter_from_user_mode second)
    pti_line = next((line for line in text.splitlines() if line.startswith("  pti (on against no-pti): ")), "")
    assert not pti_grew or ("; grew most per request: " in pti_line
                            and "syscall_enter_from_user_mode (kernel) +" in pti_line), pti_line
    assert grown or "\n  control: no function of the guest's kernel grew per request" in text
    # the profiler's cost, a profiled point's rate against its instance's plain points at that count in its
    # boot, is said for each; what bounds it here is the plain points' own spread. One plain point can be held
    # up by the machine's other work more than the profiler holds its neighbour: in a clean clone of 8836078
    # no-pti's only plain point of its first boot ran while the rig's L1 booted beside it (600 requests/s,
    # its vCPU waiting 20% of the time for a CPU), its profiled point served 1,348 and its other boots'
    # points 930-1,575, so the cost read +125%. So the profiled rate is held to the spread of the plain points
    # over the four boots: below two thirds of the slowest, or above 1.5 times the fastest, it fails. The
    # control's vCPU is capped at half a CPU, and perf's sampling in the guest (its interrupts, the perf process
    # writing samples, all emulated) runs inside that cap: its share of a fixed budget is larger. In the clean
    # clone of b9491eb the control's profiled point served 83 requests/s against plain points of 147-217 in
    # its four boots (-62%), the others within their bounds. In the clean clone of 3dd8826 (the client 94% busy
    # beside the rig) no-pti's profiled point served 357 against plain points of 581-750 (-48.5%), on's 186
    # against 235-591 (-50.2%): perf under TCG can halve any instance's rate on a busy machine, so every
    # instance is held to a third of its slowest plain point, and to 1.5 times its fastest. CI's run of 32dccfc
    # (the rig's host-boot test beside it, 1,309 s there) had no-pti's profiled point serve 105 against its
    # boot's plain 615 (-83%), its other boots' 349-1,011: there the bound is waived only where the report
    # said the cost was not to be judged, with the wait it measured (a vCPU thread held off its CPU by other
    # work, WAIT_LIMIT percent of the time or more). Above, the fastest is that of every unprofiled point of the
    # instance at that count, its counted ones too (extra points of its boots, as the profiled one is): in a
    # clean clone of 28ab94a no-pti's profiled point served 2,262 against plain points of 931-1,491 (+77%, its
    # vCPU waiting 4% of the time, as in its boot's plain point), while its counted points served 918-2,003
    costs = next(line for line in text.splitlines() if line.startswith("  profiling changed throughput"))
    for name, p in prof["instances"].items():
        plain = [m["client"]["requests_per_s"] for m in points
                 if m["instance"] == name and m["connections"] == prof["connections"]]
        extra = [r["client"]["requests_per_s"] for r in got if r["kind"] == "syscalls" and r["ok"]
                 and r["instance"] == name and r["connections"] == prof["connections"]]
        (profiled,) = [r["client"]["requests_per_s"] for r in got if r["kind"] == "profile" and r["instance"] == name]
        print(f"{name}: profiled {profiled:.0f} requests/s, plain {sorted(round(v) for v in plain)}, counted "
              f"{sorted(round(v) for v in extra)}, profiling cost {p['profiling_cost']:+.1%}, "
              f"vCPU wait {p['vcpu_wait_percent']}%")
        assert math.isfinite(p["profiling_cost"]) and p["vcpu_wait_percent"] is not None, p
        contended = not p["profiling_cost_judged"] and p["vcpu_wait_percent"] >= WAIT_LIMIT and \
            f"{name} {p['profiling_cost']:+.1%} (not to be judged: a vCPU thread waited " in costs
        assert contended or min(plain) / 3 <= profiled <= 1.5 * max(plain + extra), (name, plain, extra, costs)
    # each variant's differential flame graph against the reference: no-pti's, blue where its time shrank
    # (inline, as a data: URI: the page fetches nothing; the file beside it for search and zoom)
    page = (run / "report" / "report.html").read_text()
    assert '<img src="data:image/svg+xml;base64,' in page and 'alt="differential flame graph of no-pti"' in page
    assert (run / "report" / "flame-no-pti.svg").stat().st_size > 0
    # only a detected cost is explained: on a loaded machine (CI's rig beside it) the control's interval
    # has held no change too; the run then says so first (not detected, or, where the reference's vCPU
    # waited for a CPU, not to be judged), and the control gets no why
    print("control:", report["control"])
    said = text.split("\nwhy, from the counted points:\n")
    if report["control"]["change"]["significant"]:
        assert len(said) == 2 and "\n  control: the same system calls per request (" in "\n" + said[1] and \
            "most of the cost lies outside the guest's work" in said[1], text
    else:
        warned = ("\nWARNING: the positive control was not ", "\nWARNING: the positive control cannot be judged ")
        assert text.startswith("WARNING: ") and any(w in "\n" + text for w in warned) and \
            (len(said) == 1 or "  control: " not in said[1].split("\n\n")[0]), text
    assert re.search(r"\nANSWER at on's (saturation point|peak as its first boot found it), ", res.stdout)
    # one row for pti's cost, as turning it on costs; no-pti's gain is the same fact and gets no row
    # (labelled with its side: the guest kernel's)
    assert re.search(r"\n  pti \(guest\) +[-+][0-9.]+% ", res.stdout) and not re.search(r"\n  no-pti ", res.stdout), \
        res.stdout
    assert report["variants"]["no-pti"]["seen"] and "CPU flag - pti" in report["variants"]["no-pti"]["differs"]
    # the control's expected cost: what the cap takes of the vCPU time the reference used for requests,
    # from this run's own readings (the reference's vCPU share at the peak, its share without load): a
    # machine busy beside the run lowers that share and so the cost, which a fixed range would not follow
    peak = report["peak_connections"]
    u, c = (statistics.fmean(p["host"]["vcpu_busy_percent"][0] for p in points
                             if p["instance"] == name and p["connections"] == peak) for name in ("on", "control"))
    f = statistics.fmean(r["vcpu_busy_percent"][0] for r in idle)
    limit = c if c < 50 - 2 else 50  # a control held more than 2 points under its cap ran what contention left it
    assert report["control"]["cap_percent"] == 50
    assert report["control"]["expected"] == pytest.approx((min(u, limit) - f) / (u - f) - 1, abs=1e-9), (u, c, f)
    assert ("held below their cap" in report["control"]["basis"]) == (c < 48), report["control"]
    assert "it ran without load" in report["control"]["basis"], report["control"]
    print("control:", report["control"], "pti:", pti)
    for name in ("report.html", "report.md", "report.csv", "report.json", "throughput.png", "throughput.svg",
                 "latency.png"):
        assert (run / "report" / name).stat().st_size > 0
    assert res.stdout.startswith("WARNING: ") and f"report: {run}/report/report.html" in res.stdout
    assert host_knobs() == before
    assert_nothing_left()


def run_losing_the_first_guest(argv: list[str], out: Path, timeout: float = 1800) -> tuple[int, str]:
    """`vmharness ARGV` (stdout into `out`), its progress read as it comes: the first guest whose agent
    answers is destroyed from outside at that line (`virsh destroy`, as a guest that reset is stopped by
    libvirt here), on its way to ssh. Its exit status and stderr."""
    with out.open("w") as stdout:
        p = subprocess.Popen([sys.executable, "-m", "vmharness.cli", *argv], stdout=stdout, stderr=subprocess.PIPE,
                             text=True)
        assert p.stderr is not None
        said, name, destroyed = [], "", False
        deadline = time.monotonic() + timeout
        try:
            for line in p.stderr:
                said.append(line)
                if m := re.search(r"defined (vmh-r[0-9a-f]{10}) ", line):
                    name = m.group(1)
                if "guest agent answers" in line and not destroyed:
                    proc.run(["virsh", "-c", "qemu:///system", "destroy", name], timeout=60)
                    destroyed = True
                assert time.monotonic() < deadline, "".join(said[-30:])
            return p.wait(timeout=60), "".join(said)
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=120)


def test_a_guest_that_does_not_boot_is_recorded_and_the_others_run(daemon: None, tmp_path: Path) -> None:
    """Also: an instance's own vCPU features, QEMU arguments and guest tuning profile reach its guest; and
    a guest lost after its agent answered (destroyed from outside before ssh let the harness in) is
    booted once more, said, and kept in its session's record (experiment/runner.py)."""
    prof = tmp_path / "backlog.toml"
    prof.write_text('[sysctl]\n"net.core.somaxconn" = 5555\n')
    cfg = tmp_path / "run.toml"
    cfg.write_text('[guest]\nvcpus = 1\nmemory = 768\nboot_timeout = 600\n'
                   '[[instance]]\nname = "broken"\ncmdline = "init=/bin/false"\n'
                   '[[instance]]\nname = "good"\ncpu_features = ["-rdrand"]\n'
                   'qemu_args = ["-smbios", "type=1,manufacturer=vmharness,product=instance-good"]\n'
                   f'profile = "{prof}"\n'
                   '[sweep]\nconnections = "4"\niterations = 1\nduration = 1\nwarmup = 0\nwait = 0\n'
                   '[load]\npercents = []\ncapacity = 0\n[tuning]\nprofile = "none"\n')
    run = tmp_path / "run"
    code, stderr = run_losing_the_first_guest(["run", str(cfg), "--out", str(run)], tmp_path / "stdout")
    assert code == 1, stderr[-3000:]
    got = records(run)
    failed = [r for r in got if r["kind"] == "session" and not r["ok"]]
    assert len(failed) == 1 and failed[0]["instance"] == "broken"
    lost = "the guest stopped after its agent answered (libvirt: destroyed, on the guest's reset or from outside)"
    assert f"good, iteration 0: its guest was lost after its agent answered; booting it once more: {lost}" in stderr
    (good,) = [r for r in got if r["kind"] == "session" and r["ok"]]
    assert [m.splitlines()[0] for m in good["lost_before"]] == [lost + "; its console ends with:"], good
    assert "the guest kernel panicked while booting" in failed[0]["error"]
    points = {r["key"]: r["ok"] for r in got if r["kind"] == "measurement"}
    assert points == {"broken/4/0": False, "good/4/0": True}
    host = next(r for r in got if r.get("key") == "good/4/0")["host"]  # read inside the 1 s load: 0.1 s to 0.9 s
    assert len(host["vcpu_busy_percent"]) == 1 and host["window_s"] == pytest.approx(0.8, abs=0.2), host
    assert "vfio_interrupts_per_s" not in host  # nothing passed through
    text = (run / "report" / "report.txt").read_text()
    warnings = [line for line in text.splitlines() if line.startswith("WARNING: ")]
    assert warnings[:2] == ["WARNING: the baseline 'broken' has no successful measurement",
                            "WARNING: broken iteration 0 measured nothing: the guest did not boot: the guest kernel "
                            "panicked while booting; its console ends with:"], (tmp_path / "stdout").read_text()
    manifest = json.loads((run / "manifest.json").read_text())
    facts = manifest["instances"]["good"]
    assert facts["machine"] == "vmharness instance-good" and "rdrand" not in facts["cpu_flags"]
    # the host's state at the start and the end (docs/run.md, "The hypervisor's side"), unchanged
    start, end = manifest["host_state"]["start"], manifest["host_state"]["end"]
    assert start["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert start["cmdline"] == Path("/proc/cmdline").read_text().strip() and start["smt"]["control"]
    assert start["vulnerabilities"]["mds"] and "kvm.nx_huge_pages" in start["kvm"] and start["microcode"] is not None
    assert end == start and "the host changed" not in (tmp_path / "stdout").read_text() + stderr
    assert "<qemu:arg value=\"-smbios\" />" in (run / "domains" / "good.xml").read_text()
    assert good["tuning"][0]["profile"] == "backlog"
    changes = [(c["path"], c["after"]) for c in good["tuning"][0]["changes"]]
    assert changes == [("/proc/sys/net/core/somaxconn", "5555")]  # the kernel default is 4096
    assert_nothing_left()


def test_killed_mid_run_then_resumed(daemon: None, tmp_path: Path) -> None:
    """With the adaptive search, so that the resumed run takes the search up from its records: the
    ladder 2, 4 (and 3 between them, if 2 was higher) in the first boot, then one more round at the
    highest mean in a second boot (max_iterations 2)."""
    cfg = tmp_path / "run.toml"
    cfg.write_text('[guest]\nvcpus = 1\nmemory = 768\n'
                   '[[instance]]\nname = "one"\n'
                   '[sweep]\nconnections = "2,4"\niterations = 2\nmax_iterations = 2\nsearch = "adaptive"\n'
                   'duration = 1\nwarmup = 0\nwait = 0\n[load]\npercents = [50]\ncapacity = 1\n' + FIGURES_OFF)
    run = tmp_path / "run"
    p = proc.spawn([sys.executable, "-m", "vmharness.cli", "run", str(cfg), "--out", str(run)],
                   stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not (run / "records.jsonl").exists() or not any(r["kind"] == "measurement" for r in records(run)):
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()[1].decode()[-2000:]
        time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert JOURNAL.exists()  # its guest and its tuning are on record
    before = {r["key"] for r in records(run) if r["kind"] == "measurement" and r["ok"]}
    res = vmh("run", "--resume", str(run))
    assert res.returncode == 0, res.stderr[-3000:]
    run_id = json.loads((run / "manifest.json").read_text())["id"]
    assert "giving back" in res.stderr and f"that an interrupted run left (owners run:{run_id})" in res.stderr
    got = [r["key"] for r in records(run) if r["kind"] == "measurement" and r["ok"]]
    assert {"one/2/0", "one/4/0"} <= set(got) <= {"one/2/0", "one/3/0", "one/4/0", "one/2/1", "one/3/1", "one/4/1"}
    assert any(k.endswith("/1") for k in got) and before <= set(got) and len(got) == len(set(got))
    # the open-loop load: one target, each iteration's point at 50% of it, the client measured once
    targets = [r for r in records(run) if r["kind"] == "load_target"]
    loads = {r["key"]: r for r in records(run) if r["kind"] == "load" and r["ok"]}
    assert len(targets) == 1 and set(loads) == {"one/@50%/0", "one/@50%/1"}
    assert all(r["rate"] == targets[0]["rates"]["50"] for r in loads.values())
    assert len([r for r in records(run) if r["kind"] == "capacity"]) == 1
    assert_nothing_left()


def test_a_bad_config_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text("[guest]\nbdf = [\"0000:b3:00.0\"]\n")  # no such device here
    res = vmh("run", str(cfg))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: no PCI device 0000:b3:00.0 on this host"), res.stderr
    cfg.write_text("[guest]\nbdf = [\"0000:b3:00.0\"]\naddress = \"198.19.0.2\"\n")
    res = vmh("run", str(cfg))
    assert res.returncode == 2 and res.stderr.startswith("error: config.guest.address '198.19.0.2' is not"), res.stderr
    assert not JOURNAL.exists()
