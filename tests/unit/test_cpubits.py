"""The CPU bits an instance shows its guest, checked on fake host trees against QEMU 7.2's recorded
answer: unknown names refused with close names, a `*-no` bit the host lacks refused unless claimed, the
host's verdict read from KVM's expansion of `host` or from its vulnerability files; QEMU asked once a
run, and not at all when no instance names a feature."""

from __future__ import annotations

import dataclasses
import io
import tarfile
from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.analysis import variants
from vmharness.errors import HarnessError
from vmharness.experiment import cpucheck
from vmharness.host.inspect import cpubits
from vmharness.host.snapshot import snapshot
from vmharness.model import cpubit, sections
from vmharness.system.root import HostRoot

GOLDEN = Path(__file__).with_name("golden")
QMP = (GOLDEN / "qemu-7.2-qmp-expansion-max-tcg.jsonl").read_text()  # abridged
# One session on this machine (QEMU 7.2.22, -accel kvm: a PVM KVM), max then host, as cpubits.ask asks them
MAX, HOST = cpubits.parse_models((GOLDEN / "qemu-7.2-qmp-expansion-max-host-kvm.jsonl").read_text())
KNOWN = frozenset(MAX)
TCG = cpubits.Qemu(KNOWN, None, "qemu (TCG)")
VULN = "sys/devices/system/cpu/vulnerabilities"


def host(tmp_path: Path, **files: str) -> HostRoot:
    """A host tree whose vulnerability files say `files` (name -> text)."""
    for name, text in files.items():
        (tmp_path / VULN).mkdir(parents=True, exist_ok=True)
        (tmp_path / VULN / name).write_text(text + "\n")
    return HostRoot(tmp_path)


def refusal(root: HostRoot, qemu: cpubits.Qemu, features: tuple[str, ...], claims: tuple[str, ...] = ()) -> str:
    with pytest.raises(HarnessError) as err:
        cpubits.check(root, qemu, "mit", features, claims)
    assert "\n" not in err.value.message and err.value.hint
    return f"{err.value.message} / {err.value.hint}"


def test_the_recorded_answer_holds_flags_and_the_aliases_libvirt_writes() -> None:
    assert {"mds-no", "md-clear", "lahf_lm", "pclmuldq", "lahf-lm"} <= KNOWN
    assert not {"srso-no", "rfds-no", "gds-no", "bhi-no"} & KNOWN  # QEMU 7.2 has none of them


def test_an_unknown_name_is_refused_naming_instance_feature_and_close_names(tmp_path: Path) -> None:
    said = refusal(host(tmp_path), TCG, ("+md-clear", "+mds_no"))
    assert "instance mit: cpu_features '+mds_no'" in said and "knows no CPU feature 'mds_no'" in said
    assert "close names: mds-no" in said
    said = refusal(host(tmp_path), TCG, ("-srso-no",))  # hiding a name QEMU lacks is refused as well
    assert "'srso-no'" in said and "close names:" in said


def test_a_name_with_nothing_close_points_at_qemus_list(tmp_path: Path) -> None:
    assert "-cpu help lists" in refusal(host(tmp_path), TCG, ("+zzzzzzzzzzzz",))


def test_a_no_bit_the_host_is_affected_by_is_refused_with_what_was_read(tmp_path: Path) -> None:
    root = host(tmp_path, spec_store_bypass="Vulnerable", mds="Not affected")
    said = refusal(root, TCG, ("+mds-no", "+ssb-no"))
    assert "cpu_features +ssb-no" in said and "spec_store_bypass says 'Vulnerable'" in said
    assert 'claim_unmitigated = ["ssb-no"]' in said


def test_a_no_bit_the_host_is_free_of_passes_with_a_note(tmp_path: Path) -> None:
    notes = cpubits.check(host(tmp_path, mds="Not affected"), TCG, "mit", ("+mds-no", "+pcid"), ())
    assert notes == ["mit: +mds-no checked: the host's /sys/devices/system/cpu/vulnerabilities/mds says "
                     "'Not affected'"]


def test_a_claimed_no_bit_passes_and_says_so(tmp_path: Path) -> None:
    notes = cpubits.check(host(tmp_path, mds="Mitigation: Clear CPU buffers"), TCG, "mit", ("+mds-no",), ("mds-no",))
    assert len(notes) == 1 and "although the host lacks it" in notes[0] and "claimed" in notes[0]


def test_a_claim_of_a_bit_not_required_is_refused(tmp_path: Path) -> None:
    said = refusal(host(tmp_path, mds="Vulnerable"), TCG, ("-mds-no",), ("mds-no",))
    assert "claim_unmitigated 'mds-no' is not one of its cpu_features with +" in said


def test_hiding_a_bit_is_never_a_claim(tmp_path: Path) -> None:
    assert cpubits.check(host(tmp_path, mds="Vulnerable"), TCG, "mit", ("-mds-no", "-md-clear"), ()) == []


def test_a_host_kernel_without_the_file_does_not_vouch(tmp_path: Path) -> None:
    said = refusal(host(tmp_path), TCG, ("+taa-no",))
    assert "has no /sys/devices/system/cpu/vulnerabilities/tsx_async_abort" in said


def test_a_no_bit_with_no_matching_file_is_refused(tmp_path: Path) -> None:
    qemu = dataclasses.replace(TCG, known=KNOWN | {"xyz-no"})
    assert "no vulnerability file is known to match xyz-no" in refusal(host(tmp_path), qemu, ("+xyz-no",))


@pytest.mark.parametrize(("text", "ok"), [
    ("Mitigation: Retpolines; STIBP: disabled; RSB filling; PBRSB-eIBRS: Not affected; BHI: Not affected", True),
    ("Mitigation: Enhanced / Automatic IBRS; IBPB: conditional; RSB filling; PBRSB-eIBRS: SW sequence; "
     "BHI: BHI_DIS_S", False),
])
def test_bhi_no_reads_its_part_of_spectre_v2(tmp_path: Path, text: str, ok: bool) -> None:
    qemu = dataclasses.replace(TCG, known=KNOWN | {"bhi-no"})  # a later QEMU's
    root = host(tmp_path, spectre_v2=text)
    if ok:
        assert cpubits.check(root, qemu, "mit", ("+bhi-no",), ())
    else:
        assert "spectre_v2 says" in refusal(root, qemu, ("+bhi-no",))


def test_under_kvm_the_expansion_of_host_decides_not_the_files(tmp_path: Path) -> None:
    root = host(tmp_path, mds="Vulnerable", tsx_async_abort="Not affected")
    kvm = cpubits.Qemu(KNOWN, {"mds-no": True, "taa-no": False}, "qemu (KVM)")
    assert "KVM's expansion of the host CPU sets mds-no" in cpubits.check(root, kvm, "mit", ("+mds-no",), ())[0]
    assert "KVM's expansion of the host CPU does not set taa-no" in refusal(root, kvm, ("+taa-no",))


def test_the_hosts_expansion_as_recorded_here_vouches_for_four_no_bits(tmp_path: Path) -> None:
    assert len(MAX) == len(HOST) == 397
    assert sorted(k for k, v in HOST.items() if v and cpubits.is_no_bit(k)) == [
        "mds-no", "pschange-mc-no", "rdctl-no", "skip-l1dfl-vmentry"]
    kvm = cpubits.Qemu(KNOWN, HOST, "qemu (KVM)")
    root = host(tmp_path, spec_store_bypass="Not affected")  # the files are not read under KVM
    assert len(cpubits.check(root, kvm, "mit", ("+mds-no", "+rdctl-no", "+skip-l1dfl-vmentry"), ())) == 3
    assert "does not set ssb-no" in refusal(root, kvm, ("+ssb-no",))


def test_both_expansions_come_from_one_session_and_a_refusal_is_named() -> None:
    line = next(ln for ln in QMP.splitlines() if '"model"' in ln)
    assert len(cpubits.parse_models(f"{line}\n{line}\n")) == 2
    with pytest.raises(HarnessError, match="QEMU refused query-cpu-model-expansion: no host"):
        cpubits.parse_models('{"QMP": {}}\n{"error": {"class": "GenericError", "desc": "no host"}}\n')


def _cfg(*instances: sections.InstanceSection, uri: str = "qemu:///system") -> sections.RunConfig:
    cfg = sections.RunConfig(instance=instances)
    return dataclasses.replace(cfg, guest=dataclasses.replace(cfg.guest, uri=uri, accel="tcg"))


def test_the_run_asks_qemu_once_for_all_instances_and_not_without_features(tmp_path: Path) -> None:
    asked: list[bool] = []

    def ask(kvm: bool) -> cpubits.Qemu:
        asked.append(kvm)
        return TCG

    said: list[str] = []
    plain = sections.InstanceSection(name="base")
    cpucheck.preflight(HostRoot(tmp_path), _cfg(plain, plain), said.append, ask)
    assert asked == []
    root = host(tmp_path, mds="Not affected")
    a = sections.InstanceSection(name="a", cpu_features=("+mds-no",))
    b = sections.InstanceSection(name="b", cpu_features=("-md-clear",))
    cpucheck.preflight(root, _cfg(plain, a, b), said.append, ask)
    assert asked == [False]  # a host tree that is not / is never asked under KVM
    assert any("this machine's qemu (TCG)" in s for s in said) and any("a: +mds-no checked" in s for s in said)
    bad = sections.InstanceSection(name="c", cpu_features=("+ssb-no",))
    with pytest.raises(HarnessError, match="instance c: cpu_features \\+ssb-no"):
        cpucheck.preflight(root, _cfg(a, bad), said.append, ask)


def test_guests_on_another_machine_are_not_checked_here(tmp_path: Path) -> None:
    said: list[str] = []
    inst = sections.InstanceSection(name="a", cpu_features=("+nonsense",))
    cpucheck.preflight(HostRoot(tmp_path), _cfg(inst, uri="qemu+ssh://far/system"), said.append,
                       lambda kvm: pytest.fail("asked"))
    assert said and "not checked" in said[0]


def test_claim_unmitigated_is_a_guests_setting_and_takes_names_only() -> None:
    with pytest.raises(HarnessError, match=r"claim_unmitigated\[0\] '\+mds-no' is not a CPU feature's name"):
        cpubit.check_claim("+mds-no", "instance[0].claim_unmitigated[0]")
    assert cpubit.check_claim("mds-no", "x") == "mds-no"


def test_the_variant_check_says_when_the_bits_changed_nothing_the_guest_reports() -> None:
    facts = {"kernel": "6.1", "cmdline": "quiet", "cpu_flags": ["fpu"], "vulnerabilities": {"mds": "Not affected"}}
    m = {"config": {"instance": [{"name": "base"}, {"name": "bits", "cpu_features": ["+mds-no"]}]},
         "instances": {"base": facts, "bits": facts}}
    [d] = variants.diffs(m, "base")
    [flag] = variants.diff_flags([d], "base")
    assert flag.startswith("bits's cpu_features differ from base's") and "QEMU may have dropped the bits" in flag
    shown = {**facts, "vulnerabilities": {"mds": "Vulnerable"}}
    [d] = variants.diffs({**m, "instances": {"base": facts, "bits": shown}}, "base")
    assert variants.diff_flags([d], "base") == [] and "mds: Not affected -> Vulnerable" in d.lines


def test_a_snapshot_holds_the_vulnerability_files_and_answers_the_check(tmp_path: Path) -> None:
    fake = FakeHost(tmp_path / "host")
    fake.finish()
    host(tmp_path / "host", mds="Not affected", spec_store_bypass="Vulnerable")
    with tarfile.open(fileobj=io.BytesIO(snapshot.build(HostRoot(tmp_path / "host"))), mode="r:gz") as tar:
        tar.extractall(tmp_path / "snap", filter="data")
    snap = HostRoot(tmp_path / "snap")
    assert cpubits.check(snap, TCG, "mit", ("+mds-no",), ())
    assert "spec_store_bypass says 'Vulnerable'" in refusal(snap, TCG, ("+ssb-no",))
