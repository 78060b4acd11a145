"""Hostile inputs of the hypervisor's side, through the real command (tests/hostile_kit.py runs each case):

- **A damaged `host_state`** in a run folder's manifest (not an object, a table that is a list, a value
  that is a number or an object): `report` and `compare` end in one error naming the file and the key.
- **Escape sequences** in a recorded host's cmdline: the comparison shows them escaped.
- **CPU bits** in a run's configuration (`run --print-xml`, on a host tree): a claim that is not a name,
  a claim of a bit not asked for, a name QEMU does not know, a `*-no` bit the host tree's vulnerability
  file refuses, and a vulnerability file that is a FIFO (never opened: it would block).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests import hostile_kit
from tests.hostile_kit import GOOD_MANIFEST, GOOD_RECORDS, Case, Outcomes, S, a_run_dir, both, run_toml

ESC = "\x1b[2J\r\x07\x9b"
RAW = ("\x1b", "\x07", "\x9b", "\x08")


def state(**changes: Any) -> dict[str, Any]:
    good: dict[str, Any] = {"boot_id": "b-1", "cmdline": "quiet", "microcode": "0x1",
                            "smt": {"control": "on", "active": "1"}, "vulnerabilities": {"mds": "Not affected"},
                            "kvm": {"kvm.nx_huge_pages": "N"}}
    return {**good, **changes}


def folder(host_state: Any, name: str = "rd") -> hostile_kit.Build:
    manifest = {**json.loads(GOOD_MANIFEST), "host_state": host_state}
    build = a_run_dir(json.dumps(manifest), GOOD_RECORDS)
    if name == "rd":
        return build

    def elsewhere(cwd: Any) -> None:
        hostile_kit.with_file(f"{name}/manifest.json", json.dumps(manifest))(cwd)
        hostile_kit.with_file(f"{name}/records.jsonl", GOOD_RECORDS)(cwd)
    return elsewhere


GOOD = {"start": state(), "end": state()}
TOML = '[guest]\naccel = "tcg"\n[[instance]]\nname = "a"\n'
VULN = "sys/devices/system/cpu/vulnerabilities"


def _fifo_in_snapshot(cwd: Any) -> None:
    hostile_kit.snapshot_host(cwd)
    hostile_kit.fifo_at(f"snap/{VULN}/mds")(cwd)


CASES = [
    Case("state-not-an-object", ("report", "rd"), ("rd/manifest.json", "host_state is damaged: not an object"),
         folder([1, 2])),
    Case("start-missing", ("report", "rd"), ("rd/manifest.json", "host_state.start is damaged"), folder({"end": None})),
    Case("start-kvm-a-list", ("report", "rd"), ("host_state.start.kvm is damaged: not a table of strings",),
         folder({"start": state(kvm=["kvm.nx_huge_pages"]), "end": None})),
    Case("end-vulnerability-a-number", ("report", "rd", "--json"),
         ("host_state.end.vulnerabilities is damaged",), folder({"start": state(), "end": state(
             vulnerabilities={"mds": 5})})),
    Case("cmdline-an-object", ("report", "rd"), ("host_state.start.cmdline is damaged: not a string (a dict)",),
         folder({"start": state(cmdline={"a": {"b": []}}), "end": None})),
    Case("compare-second-damaged", ("compare", "rd", "rd2"), ("rd2/manifest.json", "host_state.start.smt"),
         both(folder(GOOD), folder({"start": state(smt="on"), "end": None}, "rd2"))),
    Case("compare-escape-in-cmdline", ("compare", "rd", "rd2"), ("host: rd2 ran on the same boot", "\\x1b[2J"),
         both(folder(GOOD), folder({"start": state(cmdline=f"quiet {ESC}"), "end": None}, "rd2")), code=0),
    Case("claim-not-a-name", ("run", "r.toml", "--print-xml"), ("claim_unmitigated[0]", "not a CPU feature's name"),
         run_toml(TOML + 'claim_unmitigated = ["$(touch /tmp/vmh-hostile-pwned)"]\n')),
    Case("claim-not-asked-for", ("run", "r.toml", "--print-xml"),
         ("instance a: claim_unmitigated 'mds-no' is not one of its cpu_features",),
         run_toml(TOML + 'cpu_features = ["-mds-no"]\nclaim_unmitigated = ["mds-no"]\n')),
    Case("feature-qemu-lacks", ("run", "r.toml", "--print-xml"), ("instance a: cpu_features '+srso-no'",),
         run_toml(TOML + 'cpu_features = ["+srso-no"]\n')),
    Case("no-bit-the-snapshot-refuses", ("run", "r.toml", "--print-xml", *S),
         ("instance a: cpu_features +ssb-no", "spec_store_bypass says 'Vulnerable'"),
         both(run_toml(TOML + 'cpu_features = ["+ssb-no"]\n'),
              hostile_kit.snapshot_with(f"{VULN}/spec_store_bypass", "Vulnerable\n"))),
    Case("vulnerability-file-a-fifo", ("run", "r.toml", "--print-xml", *S), ("vulnerabilities/mds",),
         both(run_toml(TOML + 'cpu_features = ["+mds-no"]\n'), _fifo_in_snapshot)),
]
outcomes = hostile_kit.fixture(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_host_state_or_cpu_bit_ends_as_the_table_says(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


def test_no_escape_reaches_the_terminal_raw(outcomes: Outcomes) -> None:
    o = outcomes.by_case["compare-escape-in-cmdline"]
    assert not any(ch in o.stdout + o.stderr for ch in RAW)
