"""The host under a result: a change during a run, and the differences between the hosts of the runs a
comparison puts side by side, said before everything else.

A difference between two runs is the instances' only if their hosts were the same: another boot can
bring another cmdline (`mitigations=`, `spectre_v2=`), microcode, SMT state or KVM parameters, and
each changes what a guest's mitigations cost. So `compare` lists what differs between each run's host
and the first run's, and warns that the comparison mixes host changes nobody named. (Nothing in a
configuration names a host setting yet; host knobs set per instance, issue 26's first point, are the
ones a comparison will be able to call named.) A run folder made before the host's state was recorded
has no `host_state`: it reports as it always did, and a comparison says it cannot tell its host.

Runs from different machines are said to be so, not "another boot of the host": the host state's
machine-id, hostname and CPU model, and a run manifest's host facts (CPU model, DMI product), tell
machines apart where both runs name them. A run's own warning of a host that changed under it is kept
in a comparison, prefixed with the run's folder name.

`host_state` is read back from a manifest that may be damaged: its shape is checked here, and a fault
is an error naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.host.inspect import hoststate
from vmharness.rundir.store import MANIFEST, RunDir

KEY = "host_state"
_TABLES = ("smt", "vulnerabilities", "kvm")
MACHINE = (*hoststate.IDENTITY, "product")  # what tells machines apart (identity): another one is no other boot


def _fault(path: Path, key: str, what: str) -> HarnessError:
    return HarnessError(f"{path}: {key} is damaged: {what}",
                        f"restore {MANIFEST} from a copy, or delete its {KEY} to report without the host's state")


def _state(value: Any, path: Path, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fault(path, key, "not an object")
    for name in hoststate.KEYS:
        item = value.get(name)
        if name in _TABLES:
            if not isinstance(item, dict) or not all(isinstance(v, str | None) for v in item.values()):
                raise _fault(path, f"{key}.{name}", "not a table of strings")
        elif not isinstance(item, str | None):
            raise _fault(path, f"{key}.{name}", f"not a string (a {type(item).__name__})")
    return value


def states(run: RunDir) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """The host's state at the run's start and end (None: not ended, or never recorded)."""
    m = run.manifest
    if KEY not in m:
        return None
    path = run.path / MANIFEST
    recorded = m[KEY]
    if not isinstance(recorded, dict):
        raise _fault(path, KEY, "not an object")
    start = _state(recorded.get("start"), path, f"{KEY}.start")
    end = recorded.get("end")
    return start, None if end is None else _state(end, path, f"{KEY}.end")


def run_flags(run: RunDir) -> list[str]:
    """A warning when the host changed between the run's start and its end."""
    found = states(run)
    if found is None or found[1] is None:
        return []
    changed = hoststate.differences(found[0], found[1])
    if not changed:
        return []
    again = (" (it moved to another machine: a resumed run)" if "machine" in changed else
             " (it booted again: a resumed run)" if "boot" in changed else "")
    return [f"the host changed during the run{again}: " + "; ".join(changed.values())]


def identity(run: RunDir) -> dict[str, str]:
    """What names the run's machine: its host state's identity (machine-id, hostname, CPU model) and, in
    a run's manifest, the host's facts (its CPU model, DMI product); strings only."""
    found = states(run)
    start = found[0] if found is not None else {}
    facts = run.manifest.get("host")
    facts = facts if isinstance(facts, dict) else {}
    out = {k: start[k] for k in hoststate.IDENTITY if isinstance(start.get(k), str) and start[k]}
    if isinstance(facts.get("cpu_model"), str) and facts["cpu_model"]:
        out.setdefault("cpu_model", facts["cpu_model"])
    if isinstance(facts.get("machine"), str) and facts["machine"]:
        out["product"] = facts["machine"]
    return out


def compare_flags(runs: list[RunDir]) -> list[str]:
    """Each run's host against the first run's: another machine, or what differs in its recorded state;
    then one warning naming what nobody named."""
    ids = [identity(run) for run in runs]
    machines = {run.path.name: other for run, mine in zip(runs[1:], ids[1:], strict=True)
                if (other := hoststate.other_machine(ids[0], mine, MACHINE)) is not None}
    out = [f"host: {name} ran on another machine than {runs[0].path.name} ({why}): a difference between these runs "
           "may be the machines', not the instances'" for name, why in machines.items()]
    known = [(run.path.name, found[0]) for run in runs if (found := states(run)) is not None]
    if not known:
        return out
    out += [f"{run.path.name}: no record of its host's state (made before host_state was recorded): its host "
            "cannot be compared" for run in runs if KEY not in run.manifest]
    (first, base) = known[0]
    unnamed: dict[str, None] = {}
    for name, state in known[1:]:
        changed = {k: v for k, v in hoststate.differences(base, state).items() if k != "machine"}
        if not changed:
            continue
        boot = ("another machine" if name in machines else "another boot of the host" if "boot" in changed
                else "the same boot of the host")
        lines = [line for key, line in changed.items() if key != "boot"]
        out.append(f"host: {name} ran on {boot} than {first}: " + ("; ".join(lines) or "nothing else differs"))
        unnamed |= dict.fromkeys(changed)
    if unnamed:
        out.append(f"this comparison mixes host changes nobody named ({', '.join(unnamed)}): a difference between "
                   "these runs may be the host's, not the instances'")
    return out
