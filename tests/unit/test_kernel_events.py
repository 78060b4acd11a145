"""The server's kernel events per request, on inputs of known answer: a sampler stream whose /proc/stat,
/proc/interrupts and /proc/softirqs advance by set amounts, its summary's rates, the report's figures
per request with each variant's paired change (a variant with known extra switches, and a negative
control with the baseline's own counts), what the guest does each second without load left out (a
slower variant with the same work per request changes nothing), and damaged or out-of-range figures
refused by record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vmharness.analysis import events, page, report, saturation
from vmharness.errors import HarnessError
from vmharness.rundir import sample_summary, samples
from vmharness.rundir.store import RunDir
from vmharness.stats import Change


def _snapshot(t: float, ctxt: int, tlb: int, net_rx: int, timer: int, faults: int = 0) -> str:
    """One snapshot of a 2-CPU machine; the counts split over the CPUs as given."""
    return (f"@t {t}\ncpu  1 0 0 1 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n"
            f"intr 999 0 0\nctxt {ctxt}\nbtime 1700000000\nprocesses 10\n"
            "           CPU0       CPU1\n"
            f" 24:        {100 + net_rx}          0  PCI-MSI 49153-edge      virtio0-input.0\n"
            f"TLB:        {tlb // 2}       {tlb - tlb // 2}   TLB shootdowns\n"
            "                    CPU0       CPU1\n"
            f"      TIMER:     {timer}          0\n"
            f"     NET_RX:     {net_rx // 2}     {net_rx - net_rx // 2}\n"
            f"nr_free_pages 2513576\nnr_zone_inactive_anon 10\npgfault {faults}\npgmajfault 3\n"
            "1 (init) S 0 1 1 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 1 0 10 1000 100 0\n"
            "@end\n")


def test_the_summary_gives_each_counter_per_second_over_the_window() -> None:
    _, snaps = samples.parse(_snapshot(10.0, 5_000, 10, 400, 300, 70_000) +
                             _snapshot(12.0, 9_000, 30, 1_400, 500, 76_000))
    got = sample_summary.summarize(snaps)
    assert got["context_switches_per_s"] == 2_000.0  # 4,000 in 2 s
    assert got["page_faults_per_s"] == 3_000.0  # /proc/vmstat's pgfault: 6,000 in 2 s
    assert got["interrupts_per_s"] == 510.0  # the NIC's 1,000 and the TLB line's 20
    assert got["tlb_shootdowns_per_s"] == 10.0
    assert got["softirqs_per_s"] == {"TIMER": 100.0, "NET_RX": 500.0}


def test_a_counter_that_went_back_gives_no_figure() -> None:
    _, snaps = samples.parse(_snapshot(10.0, 9_000, 30, 1_400, 500, 9) + _snapshot(12.0, 5_000, 10, 400, 300, 8))
    got = sample_summary.summarize(snaps)
    assert not {"context_switches_per_s", "interrupts_per_s", "tlb_shootdowns_per_s", "softirqs_per_s",
                "page_faults_per_s"} & set(got)


def _summary(per_request: dict[str, float], rps: float) -> dict[str, Any]:
    return {"context_switches_per_s": per_request["ctxt"] * rps, "interrupts_per_s": per_request["irq"] * rps,
            "page_faults_per_s": per_request["faults"] * rps,
            "tlb_shootdowns_per_s": per_request["tlb"] * rps,
            "softirqs_per_s": {"NET_RX": per_request["net_rx"] * rps, "TIMER": 50.0}}


BASE = {"ctxt": 2.0, "irq": 1.0, "tlb": 0.01, "net_rx": 1.5, "faults": 0.5}


def _run(tmp_path: Path, mitig: dict[str, float], drift: float = 0.02) -> RunDir:
    """Two instances over four boots, the peak at 8 connections; each boot shifts every count a little
    (the same for both instances: what pairing by boot takes out)."""
    run = RunDir.create(tmp_path / "run", {"config": {"instance": [{"name": "base"}, {"name": "mitig"}],
                                                      "server": {"workers": 0}},
                                           "machines": {"server": {"machine": "guest"}, "clients": []}})
    for it in range(4):
        shift = 1 + drift * (it - 1.5)
        for name, counts in (("base", BASE), ("mitig", mitig)):
            for conns, rps in ((4, 800.0), (8, 1000.0), (16, 900.0)):
                run.append({"kind": "measurement", "key": f"{name}/{conns}/{it}", "ok": True, "instance": name,
                            "connections": conns, "iteration": it,
                            "client": {"requests_per_s": rps, "requests": int(rps * 10), "errors": {"total": 0},
                                       "latency_us": {"percentiles": {"50": 10, "90": 20, "99": 40, "99.9": 80}}},
                            "samples": {"guest": _summary({k: v * shift for k, v in counts.items()}, rps)}})
    return run


def test_per_request_counts_and_a_variants_paired_change(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, {**BASE, "ctxt": 3.0, "tlb": 0.04}))
    base, mitig = a.events
    assert base.means["context switches"] == pytest.approx(2.0) and base.iterations == 4 and not base.changes
    assert base.means["softirq TIMER"] == pytest.approx(0.05) and base.means["softirqs"] == pytest.approx(1.55)
    ctxt = mitig.changes["context switches"]
    assert ctxt.change == pytest.approx(0.5) and ctxt.low == pytest.approx(0.5) and ctxt.high == pytest.approx(0.5)
    assert mitig.changes["TLB shootdowns"].change == pytest.approx(3.0)
    said = [line for line in report.answer(a) if "kernel events" in line or line.startswith("  mitig: context")]
    assert said == ["kernel events per request on the server at the peak (8 connections), with what its kernel "
                    "does without load (no idle reading: a run with [control] takes one), each against the "
                    "baseline paired by block:",
                    "  mitig: context switches 3 (+50.0% [+50.0%, +50.0%]); page faults 0.5 (+0.0% [+0.0%, +0.0%]); "
                    "interrupts 1 (+0.0% [+0.0%, +0.0%]); "
                    "TLB shootdowns 0.04 (+300.0% [+300.0%, +300.0%]); softirqs 1.55 (+0.0% [+0.0%, +0.0%]); "
                    "of which NET_RX 1.5, TIMER 0.05 over 4 iteration(s)"]
    got = report.to_json(a)["kernel_events"]["mitig"]
    assert got["per_request"]["context switches"] == 3.0 and got["changes"]["context switches"]["significant"]
    # the page's counters table: a row an instance, a column a counter, each change with its interval; no
    # table of the page wider than the text report's (every column is in the CSV and the JSON)
    html = page.render(a, "t", [])
    counters = html.split("<h3>What the server did per request at the peak</h3>")[1].split("</table>")[0]
    assert "<th>context switches</th>" in counters and "<td>mitig</td><td>3 (+50.0% [+50.0%, +50.0%])</td>" in counters
    assert max(t.split("</tr>")[0].count("<th>") for t in html.split("<table>")[1:]) <= 13


def test_the_baselines_own_counts_change_nothing_a_negative_control(tmp_path: Path) -> None:
    a = saturation.analyse(_run(tmp_path, dict(BASE)))
    _, same = a.events
    for key, change in same.changes.items():
        assert change.change == pytest.approx(0.0, abs=1e-9) and not change.significant, key


def test_a_run_without_the_counters_reports_none(tmp_path: Path) -> None:
    run = _run(tmp_path, dict(BASE))
    path = run.path / "records.jsonl"
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    for r in kept:
        r.pop("samples", None)
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    a = saturation.analyse(RunDir.open(run.path))
    assert a.events == [] and report.to_json(a)["kernel_events"] == {}
    assert not any("kernel events" in line for line in report.answer(a))


@pytest.mark.parametrize("damage", [{"context_switches_per_s": "lots"}, {"softirqs_per_s": [1, 2]},
                                    {"softirqs_per_s": {"NET_RX": None}}, {"interrupts_per_s": True},
                                    {"page_faults_per_s": "many"}])
def test_a_damaged_counter_is_an_error_naming_the_record(tmp_path: Path, damage: dict[str, Any]) -> None:
    run = _run(tmp_path, dict(BASE))
    path = run.path / "records.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[-1])
    record["samples"]["guest"].update(damage)
    path.write_text("\n".join([*lines[:-1], json.dumps(record)]) + "\n")
    # text or true where a figure belongs is refused as the records are read, naming the line
    with pytest.raises(HarnessError, match=r"(the measurement 'mitig/16/3' is damaged \(|line \d+ is a measurement "
                                           r"record with )samples\.guest\."):
        saturation.analyse(RunDir.open(run.path))


@pytest.mark.parametrize("value", [-1.0, 2.0**64])
def test_a_counter_out_of_range_leaves_its_record_out_and_says_so(tmp_path: Path, value: float) -> None:
    run = _run(tmp_path, dict(BASE))
    path = run.path / "records.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[-2])  # mitig/8/3: at the peak
    record["samples"]["guest"]["tlb_shootdowns_per_s"] = value
    path.write_text("\n".join([*lines[:-2], json.dumps(record), lines[-1]]) + "\n")
    a = saturation.analyse(RunDir.open(run.path))
    assert "left out" in a.flags[0] and "tlb_shootdowns_per_s" in a.flags[0]
    assert a.events[1].iterations == 3


BACKGROUND = {"context_switches_per_s": 200.0, "interrupts_per_s": 100.0, "page_faults_per_s": 400.0,
              "tlb_shootdowns_per_s": 0.0, "softirqs_per_s": {"NET_RX": 0.0, "TIMER": 50.0}}


def _loaded(tmp_path: Path, rps: dict[str, float], work: dict[str, dict[str, float]], idle: bool) -> RunDir:
    """Each instance's work per request at its rate, on top of what the guest does each second whatever
    its load (BACKGROUND); with `idle`, each boot's idle record sampled that background alone."""
    run = RunDir.create(tmp_path / "run", {"config": {"instance": [{"name": n} for n in rps], "server": {"workers": 0}},
                                           "machines": {"server": {"machine": "guest"}, "clients": []}})
    for it in range(4):
        if idle:
            run.append({"kind": "idle", "instance": "base", "iteration": it, "vcpu_busy_percent": [10.0],
                        "window_s": 3.0, "samples": {"guest": BACKGROUND}})
        for name, rate in rps.items():
            sampled = _summary(work[name], rate)
            for key in ("context_switches_per_s", "interrupts_per_s", "page_faults_per_s", "tlb_shootdowns_per_s"):
                sampled[key] += BACKGROUND[key]
            for conns, r in ((4, rate * 0.8), (8, rate), (16, rate * 0.9)):
                run.append({"kind": "measurement", "key": f"{name}/{conns}/{it}", "ok": True, "instance": name,
                            "connections": conns, "iteration": it,
                            "client": {"requests_per_s": r, "requests": int(r * 10), "errors": {"total": 0},
                                       "latency_us": {"percentiles": {"50": 10, "90": 20, "99": 40, "99.9": 80}}},
                            "samples": {"guest": sampled}})
    return run


def test_what_the_guest_does_without_load_is_left_out_of_each_request(tmp_path: Path) -> None:
    # "slow" does the baseline's work per request at half its rate (a cap): the background, per request,
    # doubles for it; "dear" does half as many switches again per request at the baseline's rate
    rps, work = {"base": 1000.0, "slow": 500.0, "dear": 1000.0}, {"base": BASE, "slow": BASE,
                                                                   "dear": {**BASE, "ctxt": 3.0}}
    raw = {v.instance: v for v in saturation.analyse(_loaded(tmp_path / "raw", rps, work, idle=False)).events}
    assert raw["slow"].changes["page faults"].change > 0.3  # 0.5 per request, plus 400/s over 500 against 1000
    assert raw["slow"].changes["context switches"].significant and not raw["base"].idle
    a = saturation.analyse(_loaded(tmp_path / "less", rps, work, idle=True))
    got = {v.instance: v for v in a.events}
    for key, want in (("context switches", 2.0), ("page faults", 0.5), ("interrupts", 1.0), ("softirq NET_RX", 1.5)):
        assert got["slow"].means[key] == pytest.approx(want, rel=0.02) == got["base"].means[key], key
        assert abs(got["slow"].changes[key].change) < 0.02 and not got["slow"].changes[key].significant, key
    assert got["dear"].changes["context switches"].change == pytest.approx(0.5, abs=0.02)
    # the timer's 50/s are all background: not told from it, so no figure, and said
    assert "softirq TIMER" not in got["base"].means and got["base"].under_idle == {"softirq TIMER": 4}
    said = [line for line in report.answer(a) if line.startswith("kernel events")]
    assert said == ["kernel events per request on the server at the peak (8 connections), less what its kernel does "
                    "each second without load, each against the baseline paired by block:"]
    assert report.to_json(a)["kernel_events"]["slow"]["idle_per_s_left_out"]["page faults"] == 400.0
    assert report.to_json(a)["kernel_events"]["slow"]["under_idle"] == {"softirq TIMER": 4}


def _quieter(run: RunDir, instance: str, iterations: set[int], factor: float) -> RunDir:
    """`instance`'s points in `iterations` with the background at `factor` of the idle reading's (a vCPU
    that ran less than when the idle reading was taken), its work per request the same."""
    path = run.path / "records.jsonl"
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    for r in kept:
        if r["kind"] == "measurement" and r["instance"] == instance and r["iteration"] in iterations:
            for key in ("context_switches_per_s", "interrupts_per_s", "page_faults_per_s"):
                background = BACKGROUND[key]
                assert isinstance(background, float)
                r["samples"]["guest"][key] -= background * (1 - factor)
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return RunDir.open(run.path)


def test_an_event_a_capped_guest_had_less_of_than_without_load_gets_no_figure_and_is_said(tmp_path: Path) -> None:
    # a CI run's capped control: 58 requests a second, 240 context switches against an idle 281. Its
    # background shrank with its vCPU's share: less the idle reading, it read 0 per request, where the
    # truth is more than 0. Here "capped" serves 50 requests a second with 0.1 context switches each
    # and half the background: 105 a second against the idle 200
    rps, work = {"base": 1000.0, "capped": 50.0}, {"base": BASE, "capped": {**BASE, "ctxt": 0.1, "irq": 0.5}}
    run = _quieter(_loaded(tmp_path, rps, work, idle=True), "capped", {0, 1, 2, 3}, 0.5)
    a = saturation.analyse(run)
    got = {v.instance: v for v in a.events}
    # context switches (105 against 200) and page faults (225 against 400) are not told from the
    # background; interrupts (75 against 100) neither. No 0 stands in for them, and no change is drawn
    assert got["capped"].under_idle == {"context switches": 4, "interrupts": 4, "page faults": 4, "softirq TIMER": 4}
    told = set(got["capped"].means) | set(got["capped"].changes)
    assert not {"context switches", "interrupts", "page faults"} & told
    assert got["capped"].means["softirq NET_RX"] == pytest.approx(1.5)  # no background: told
    text = "\n".join(report.answer(a))
    assert ("  capped: no figure for context switches (in 4 of 4 point(s)), interrupts (in 4 of 4 point(s)), page "
            "faults (in 4 of 4 point(s)), softirqs of kind TIMER: no more each second than without load") in text
    # the negative control: the baseline, its background as in the idle reading, keeps every figure but the timer's
    assert got["base"].means["context switches"] == pytest.approx(2.0)
    assert got["base"].under_idle == {"softirq TIMER": 4}


def test_an_event_under_the_idle_reading_in_one_point_is_left_out_of_every_point(tmp_path: Path) -> None:
    # one boot of "slow" with a quieter background: kept in the other three alone, its mean would rest on
    # the boots that happened to read more; so it has no figure at all, and its change is not drawn
    rps, work = {"base": 1000.0, "slow": 100.0}, {"base": BASE, "slow": {**BASE, "ctxt": 0.2}}
    run = _quieter(_loaded(tmp_path, rps, work, idle=True), "slow", {2}, 0.5)
    got = {v.instance: v for v in saturation.analyse(run).events}
    assert got["slow"].under_idle == {"context switches": 1, "page faults": 1, "softirq TIMER": 4}
    assert got["slow"].points == 4  # at the peak, one a boot
    assert "context switches" not in got["slow"].means and "context switches" not in got["slow"].changes
    # interrupts stayed above the idle reading (200 a second, and 150 in the quieter boot, against 100), so
    # they keep a figure: the quieter boot's 0.5 per request against the others' 1.0 is a bias this rule
    # cannot see (it sees only a background below the idle reading's), and the interval shows the spread
    assert got["slow"].means["interrupts"] == pytest.approx(0.875)


def test_a_damaged_idle_reading_is_an_error_naming_its_record(tmp_path: Path) -> None:
    run = _loaded(tmp_path, {"base": 1000.0, "slow": 500.0}, {"base": BASE, "slow": BASE}, idle=True)
    path = run.path / "records.jsonl"
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    kept[0]["samples"]["guest"] = {**BACKGROUND, "page_faults_per_s": "many"}
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    with pytest.raises(HarnessError, match=r"records\.jsonl line 1 is a idle record with samples\.guest\."
                                           r"page_faults_per_s \"many\", not a number"):
        saturation.analyse(RunDir.open(run.path))
    kept[0]["samples"]["guest"]["page_faults_per_s"] = -400.0  # out of range: the record is left out, and said
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    a = saturation.analyse(RunDir.open(run.path))
    assert "left out" in a.flags[0] and "page_faults_per_s" in a.flags[0]
    assert a.events[1].idle["page faults"] == 400.0  # from the three idle records left


def test_a_change_too_wide_to_tell_anything_is_said_in_words() -> None:
    """The demo's page faults: about 20 a point, 0.0018 per request, a ratio of -100% to +538877295527%."""
    wild = Change(1.016, -1.0, 5388772955.272, 0.4, 4, 0.95, "paired by block")
    assert events.figure(0.00288, wild) == \
        "0.00288 (+101.6%, its interval more than 10-fold wide: too few to compare)"
    tight = Change(0.38, 0.166, 0.633, 0.01, 4, 0.95, "paired by block")
    assert events.figure(0.284, tight) == "0.284 (+38.0% [+16.6%, +63.3%])"
    near = Change(-0.5, -0.89, 0.0, 0.05, 4, 0.95, "paired by block")  # nine-fold: still printed
    assert events.figure(1.0, near) == "1 (-50.0% [-89.0%, +0.0%])"
    assert events.figure(1.0, None) == "1"
