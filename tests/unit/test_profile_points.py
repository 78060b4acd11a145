"""[explain] profile's points: where the plan puts them, what a record of one must hold, and inferno's
real collapse-perf folding a `perf script` text as the capture keeps it (bench/profile.py)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from vmharness.bench import at_peak, explained, openloop, plan, profile
from vmharness.errors import HarnessError
from vmharness.model import config
from vmharness.rundir import record_check
from vmharness.system.machine import Machine

# Two samples as the guest's perf 6.1 prints them: one of dd in the kernel's syscall entry, one idle
SCRIPT = """dd   356 [000]    18.528222:    1001001 cpu-clock:
\tffffffff81a38b6d syscall_enter_from_user_mode+0x1d ([kernel.kallsyms])
\tffffffff81a38bcb do_syscall_64+0x4b ([kernel.kallsyms])
\tffffffff81c00126 entry_SYSCALL_64_after_hwframe+0x6e ([kernel.kallsyms])
\t           f7fb1 write+0x11 (/usr/lib/x86_64-linux-gnu/libc.so.6)

swapper     0 [000]    18.529222:    1001001 cpu-clock:
\tffffffff81a4e8cb native_safe_halt+0xb ([kernel.kallsyms])
\tffffffff81a4ea18 default_idle_call+0x38 ([kernel.kallsyms])
\tffffffff810fb856 do_idle+0x206 ([kernel.kallsyms])

dd   356 [000]    18.530205:    1001001 cpu-clock:
\tffffffff81a38b6d syscall_enter_from_user_mode+0x1d ([kernel.kallsyms])
\tffffffff81a38bcb do_syscall_64+0x4b ([kernel.kallsyms])
\tffffffff81c00126 entry_SYSCALL_64_after_hwframe+0x6e ([kernel.kallsyms])
\t           f7fb1 write+0x11 (/usr/lib/x86_64-linux-gnu/libc.so.6)

"""


def _cfg(tmp_path: Path, extra: str = "") -> Any:
    f = tmp_path / "r.toml"
    f.write_text('[[instance]]\nname = "base"\n[[instance]]\nname = "pti"\ncmdline = "pti=on"\n'
                 '[sweep]\nconnections = "2,8"\niterations = 3\n[load]\npercents = []\n'
                 f'[explain]\nprofile = true\n{extra}')
    return config.load_run(f)


def _measurement(inst: str, conns: int, rps: float) -> dict[str, Any]:
    return {"kind": "measurement", "key": f"{inst}/{conns}/0", "instance": inst, "connections": conns,
            "iteration": 0, "ok": True, "client": {"requests_per_s": rps, "requests": int(rps * 2)}}


def _profiled(inst: str, it: int, ok: bool = True) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": "profile", "key": f"{inst}/profile/{it}", "instance": inst, "connections": 8,
                           "iteration": it, "ok": ok}
    if ok:
        rec |= {"client": {"requests_per_s": 700.0, "requests": 1400},
                "profile": {"file": f"profiles/{inst}-{it}.folded", "sha256": "0" * 64, "bytes": 10, "frequency": 999}}
    return rec


def test_one_profile_per_instance_in_its_first_boot_after_the_target(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    records: list[dict[str, Any]] = [_measurement("base", c, r) for c, r in ((2, 500.0), (8, 900.0))]
    assert at_peak.profiled_points(cfg, records) == []  # no target yet
    target = at_peak.new_target(cfg, records)
    assert target is not None and target["connections"] == 8  # a profile alone asks for the peak
    records.append(target)
    assert [p.key for p in at_peak.profiled_points(cfg, records)] == ["base/profile/0", "pti/profile/0"]
    assert all(p.profiled and p.connections == 8 for p in at_peak.profiled_points(cfg, records))
    assert [p.key for p in at_peak.after_sweep(cfg, records, 1)] == ["pti/profile/1", "base/profile/1"]
    assert plan.planned(cfg) == 2 * 2 * 3 + 2  # the grid's points and one profile per instance
    records += [_profiled("base", 0), _profiled("pti", 0, ok=False)]
    # base has its profile; pti's failed in boot 0: offered in its next boot, never twice in one
    assert [p.key for p in at_peak.after_sweep(cfg, records, 0)] == []
    assert [p.key for p in at_peak.after_sweep(cfg, records, 1)] == ["pti/profile/1"]
    records.append({"kind": "dropped", "instance": "pti", "iteration": 1, "reason": "x"})
    assert at_peak.profiled_points(cfg, records) == []


def test_a_profile_record_is_checked_as_a_point() -> None:
    good = _profiled("base", 0)
    assert record_check.numbers_fault(good) is None and record_check.point_key(good) == "base/profile/0"
    for key, value in (("bytes", 0), ("bytes", -5), ("frequency", 0), ("frequency", 10**9), ("bytes", 1.5)):
        bad = {**good, "profile": {**good["profile"], key: value}}
        fault = record_check.numbers_fault(bad)
        assert fault is not None and f"profile.{key}" in fault.detail, (key, value)


def test_the_collapse_tool_is_the_one_make_installs() -> None:
    found = openloop.local_binary(explained.COLLAPSE)
    assert Path(found).is_file() or shutil.which(found), f"{found}: run `make inferno`"


def test_inferno_folds_a_perf_script_into_kernel_marked_stacks_weighed_in_nanoseconds() -> None:
    folded = profile.fold(SCRIPT, openloop.local_binary(explained.COLLAPSE))
    lines = dict(line.rsplit(" ", 1) for line in folded.splitlines())
    assert lines == {
        "dd;write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];syscall_enter_from_user_mode_[k]": "2002002",
        "swapper;do_idle_[k];default_idle_call_[k];native_safe_halt_[k]": "1001001"}


def test_a_collapse_that_folds_nothing_or_is_missing_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="folded nothing"):
        profile.fold("not perf output at all\n", openloop.local_binary(explained.COLLAPSE))
    with pytest.raises(HarnessError, match="is not installed") as err:
        profile.fold(SCRIPT, str(tmp_path / "no-such-collapse"))
    assert "make inferno" in (err.value.hint or "")


def test_perf_samples_only_the_window_it_is_switched_on_for_here(tmp_path: Path) -> None:
    """The capture's real perf on this machine: a command run before `on` is not in the profile, one run
    between `on` and `off` is; `discard` stops perf and removes its folder."""
    m = Machine()
    perf = profile.Perf.start(m)
    try:
        subprocess.run(["sh", "-c", "head -c 20000000 /dev/zero | md5sum"], check=True, capture_output=True)
        perf.on()
        subprocess.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=200000"], check=True,
                       capture_output=True)
        perf.off()
        stacks = profile.fold(perf.script(), openloop.local_binary(explained.COLLAPSE)).splitlines()
    finally:
        perf.discard()
    assert any(s.startswith("dd;") for s in stacks) and not any(s.startswith("md5sum;") for s in stacks)
    assert not Path(perf.folder).exists() and not Path(f"/proc/{perf.pid}").exists()


def test_a_perf_that_cannot_start_is_said_at_once() -> None:
    """perf refuses a sampling rate of 0 and exits: said in seconds, not at the two-minute timeout, with
    what perf said, and nothing left behind."""
    started = time.monotonic()
    with pytest.raises(HarnessError, match=r"did not answer 'disable': .*aborting") as err:
        profile.Perf.start(Machine(), frequency=0).discard()  # discard: only if it did start
    assert time.monotonic() - started < 30 and "linux-perf" in (err.value.hint or "")
    assert not list(Path("/tmp").glob("vmh-profile.*"))
