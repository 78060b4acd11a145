"""An attribution study's answer from a run ([study]: model/switches.py makes its instances): at the
baseline's peak, each switch's marginal cost in throughput, p50 and p99, the total and the interaction
(analysis/attribution.py), the steps from all off to all on for the waterfall figure, and the switches
left out of the family with the reason: dropped before they were measured (their guest reported the
same mitigations as the reference's), or measured but reported the same (the variant check)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vmharness.analysis import attribution as attr
from vmharness.analysis.cells import Cell
from vmharness.analysis.variants import Diff, qemu_label
from vmharness.bench import plan
from vmharness.model import derived, hoststudy, switches

DROPPED = "dropped before it was measured: its guest reported the same mitigations"
HOST_DROPPED = "dropped before it was measured: its host boot reported the same mitigations"
METRICS = (("throughput", True), ("p50", False), ("p99", False))  # (metric, higher is better)


@dataclass(frozen=True)
class View:
    switches: tuple[str, ...]  # those compared, by label: the guest's in the configuration's order, then the host's
    left_out: dict[str, str]  # switch -> why it is not in the family
    studies: tuple[attr.Study, ...]  # the guest's switches, one per metric of METRICS, where any is compared
    waterfall: list[tuple[str, float, float]]  # throughput, from all off to all on (the guest's switches)
    # the hypervisor's switches (qemu, kvm_modules) -> what each set on and off; the others are the guest kernel's
    hypervisor: dict[str, str] = field(default_factory=dict)
    # the host's switches, a family of their own (no host boot turns them all off): each against the reference
    host: tuple[attr.Study, ...] = ()
    sides: dict[str, str] = field(default_factory=dict)  # label -> host, guest or hypervisor
    off: dict[str, str] = field(default_factory=dict)  # label -> the instance with that switch off


def _names(study: dict[str, Any], key: str, where: str) -> list[str]:
    names = study.get(key)
    found = [s for s in names if isinstance(s, str)] if isinstance(names, list) else []
    return list(switches.check_distinct(found, f"{where}: config.study.{key}"))


def _study(manifest: dict[str, Any], where: str) -> tuple[list[str], bool, list[str]]:
    """The configured study's switches, in order, whether it asked for each one on alone, and its host
    switches; a switch named twice (a manifest written by hand: run reads none such) is refused as the
    file's error."""
    study = manifest.get("config", {}).get("study")
    if not isinstance(study, dict):
        return [], False, []
    return _names(study, "switches", where), study.get("one_on") is True, _names(study, "host_switches", where)


def _values(cell: Cell, metric: str) -> dict[Any, float]:
    return cell.by_block(cell.rps if metric == "throughput" else cell.latency[metric.removeprefix("p")])


def view(manifest: dict[str, Any], records: list[dict[str, Any]], table: dict[str, dict[int, Cell]],
         peak: int | None, baseline: str, found: list[Diff], where: str = "manifest.json") -> View | None:
    """None for a run without a study, or a report whose baseline is not the study's reference.
    `where`: the manifest's path, for errors."""
    names, one_on, host = _study(manifest, where)
    configured = [i.get("name") for i in manifest.get("config", {}).get("instance", []) if isinstance(i, dict)]
    if not (names or host) or peak is None or not configured or configured[0] != baseline:
        return None
    lab = {s: hoststudy.label(tuple(host), tuple(names), s, on_host=False) for s in names}
    hlab = {s: hoststudy.label(tuple(host), tuple(names), s, on_host=True) for s in host}
    sides = {**{lab[s]: hoststudy.HYPERVISOR if s in switches.HYPERVISOR else hoststudy.GUEST for s in names},
             **{hlab[s]: hoststudy.HOST for s in host}}
    off = {**{lab[s]: f"no-{s}" for s in names}, **{hlab[s]: hoststudy.name(s) for s in host}}
    dropped = plan.dropped(records)  # the runner's own test (experiment/runner.py)
    gone = {s for s in names if f"no-{s}" in dropped}
    left = {lab[s]: DROPPED for s in names if s in gone}
    left |= {hlab[s]: HOST_DROPPED for s in host if hoststudy.name(s) in dropped}
    unseen = {d.instance.removeprefix("no-") for d in found if d.instance.startswith("no-") and not d.seen}
    for s in names:
        if lab[s] not in left and s in unseen:
            left[lab[s]] = "measured, but its guest reported the same mitigations as the reference's"
    for label in off:
        if label not in left and peak not in table.get(off[label], {}):
            left[label] = f"not measured at {peak} connections"
    compared = tuple(s for s in names if lab[s] not in left)
    compared_host = tuple(hlab[s] for s in host if hlab[s] not in left)
    # all-off and only-X that the switches dropped at their boot left standing for another instance
    # (model/derived.py): that one's points are theirs
    stand = derived.stand_ins(names, one_on, gone, baseline)
    variants = {attr.ALL_ON: baseline, **{attr.leave_one_out(lab[s]): f"no-{s}" for s in compared},
                **{attr.one_on(lab[s]): stand.get(f"only-{s}", f"only-{s}") for s in compared}}
    if names:
        variants[attr.ALL_OFF] = stand.get("all-off", "all-off") if len(names) > 1 else f"no-{names[0]}"
    cells = {k: table[v][peak] for k, v in variants.items() if peak in table.get(v, {})}
    side = {lab[s]: f"on, {_hypervisor(manifest, baseline, s)}; off, {_hypervisor(manifest, f'no-{s}', s)}"
            for s in names if s in switches.HYPERVISOR}
    host_studies: tuple[attr.Study, ...] = ()
    if compared_host and attr.ALL_ON in cells:
        hcells = {attr.ALL_ON: cells[attr.ALL_ON],
                  **{attr.leave_one_out(h): table[off[h]][peak] for h in compared_host}}
        host_studies = tuple(attr.study(metric, {k: _values(c, metric) for k, c in hcells.items()}, compared_host,
                                        higher_is_better=up) for metric, up in METRICS)
    labels = (*(lab[s] for s in compared), *compared_host)
    if not compared:
        return View(labels, left, (), [], side, host_studies, sides, off)
    studies = tuple(attr.study(metric, {k: _values(c, metric) for k, c in cells.items()}, [lab[s] for s in compared],
                               higher_is_better=up) for metric, up in METRICS)
    steps = attr.waterfall({k: _values(c, "throughput") for k, c in cells.items()}, [lab[s] for s in compared])
    return View(labels, left, studies, steps, side, host_studies, sides, off)


def _hypervisor(manifest: dict[str, Any], name: str, switch: str) -> str:
    """What the hypervisor's `switch` set for the instance `name`: its QEMU, or its KVM modules' files."""
    if switch == switches.QEMU:
        return qemu_label(manifest, name)
    instances = manifest.get("config", {}).get("instance", [])
    inst = next((i for i in instances if isinstance(i, dict) and i.get("name") == name), {})
    files = inst.get("kvm_modules") if isinstance(inst, dict) else None
    return f"KVM modules {', '.join(str(f) for f in files)}" if files else "the host's stock KVM modules"


def lines(v: View | None, peak: int | None) -> list[str]:
    """The study in the text report: a line a switch and metric, then the switches left out."""
    if v is None:
        return []
    out = [f"attribution at {peak} connections ({v.studies[0].method})" if v.studies else
           "attribution: no switch of the guest to compare" if v.host else "attribution: no switch to compare"]
    for s in v.studies:
        out += [f"  {s.metric}: {line}" for line in s.lines()]
    if v.host:
        out.append(f"  the host's switches, each against the reference in its own host boot ({v.host[0].method}):")
        out += [f"  {s.metric}: {line}" for s in v.host for line in s.lines()]
    out += [f"  {name}: left out: {why}" for name, why in v.left_out.items()]
    out += [f"  {name} is the hypervisor's switch: {what}" for name, what in v.hypervisor.items()]
    return out


def to_json(v: View | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"switches": list(v.switches), "left_out": v.left_out,
            "by_metric": {s.metric: s.to_json() for s in v.studies},
            "waterfall": [{"step": label, "from": a, "to": b} for label, a, b in v.waterfall],
            "by_metric_host": {s.metric: s.to_json() for s in v.host},
            "sides": {s: _SIDE_WORDS[v.sides.get(s, hoststudy.GUEST)] for s in (*v.switches, *v.left_out)},
            "off": v.off, "hypervisor": v.hypervisor}


# the sides as the report's JSON has always named them
_SIDE_WORDS = {hoststudy.GUEST: "guest kernel", hoststudy.HOST: "host kernel", hoststudy.HYPERVISOR: "hypervisor"}
