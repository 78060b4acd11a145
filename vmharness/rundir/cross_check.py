"""Records set beside the run: what each must agree with in the manifest and in the other records to count.

record_check.py judges a record alone; a record that is well formed can still contradict the run that
holds it, and a forged or damaged one would then change an answer: a point of an instance, at a
connection count or at a load's percent the run never had, VM exits counted in a guest the manifest
says ran under TCG, a counted point whose shorter load counted more calls than its load (its calls per
request would shrink), a study's `dropped` record for an instance measured after it. Each is left out
of every figure as "contradicting the run", named by its file and line in the report's first warning
(`report --strict` refuses it), exactly as a record that fails record_check; `--resume` reads through
the same reader (store.RunDir.records), so it measures such a point again.

What is missing cannot be left out; it is said in a warning naming the fault: a point the manifest's
tally counts as measured with no record for it, and the `idle` record a run with a control takes in each
of its baseline's boots (the control's expectation and the work per request subtract it).

Only what the manifest states is checked: a run folder from before a field was written reports as it
always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vmharness.errors import HarnessError
from vmharness.model import connections as conn_spec
from vmharness.model.hoststudy import PREFIX as HOST_STUDIED
from vmharness.rundir import record_check
from vmharness.rundir.record_check import CONTRA, KEYED, Fault

Kept = Sequence[tuple[int, dict[str, Any]]]  # the records that passed record_check, by line number
POINTS = (*KEYED, "load_target")  # the records of one connection count
STUDIED = ("no-", "only-")  # the prefixes of a study's instances (model/derived.py), and "all-off"


def instance_names(manifest: dict[str, Any]) -> list[str]:
    return [i["name"] for i in manifest.get("config", {}).get("instance", [])]  # checked by store.manifest


def _counts(manifest: dict[str, Any]) -> tuple[tuple[int, ...], bool] | None:
    """The counts the run's sweep measures, and whether any count between the first and last may be
    one (the adaptive search's ladder: bench/plan.py); None when the manifest does not say."""
    sweep = manifest.get("config", {}).get("sweep")
    text = sweep.get("connections") if isinstance(sweep, dict) else None
    if not isinstance(text, str):
        return None
    try:
        counts = conn_spec.parse(text, "config.sweep.connections")
    except HarnessError as exc:
        raise HarnessError(f"manifest.json: {exc.message}", "the run directory is damaged: restore manifest.json "
                           "from a copy") from exc
    return counts, sweep.get("search") == "adaptive"


def _shorter(rec: dict[str, Any]) -> str | None:
    """A counted point whose load served more requests than the shorter load before it, yet whose server
    made fewer calls in all (bench/syscalls.per_request takes the one from the other: its calls per
    request would shrink below nothing). Nothing else is held to it: one call of the server's may come
    more often in the shorter load (epoll_wait returns as often as the server waits, which is not per
    request: a demo's run under TCG counted 35 against 34, per_request then reads a small negative
    difference for it, which is noise, not damage); the calls of the guest's other processes (`all`)
    come and go with their own work; and a load that served no more requests beyond the shorter load's
    than it has connections (a load whose rate fell under TCG) makes per_request say nothing, left out
    and said by the report."""
    calls, less, client = rec.get("syscalls"), rec.get("shorter"), rec.get("client")
    if not isinstance(calls, dict) or not isinstance(less, dict) or not isinstance(client, dict):
        return None
    served, fewer_served = client.get("requests"), less.get("requests")
    if not (isinstance(served, int) and isinstance(fewer_served, int) and served > fewer_served):
        return None
    load, short = calls.get("server"), less.get("server")
    if isinstance(load, int) and isinstance(short, int) and short > load:
        return f"its shorter load counted more calls than its load (server: {short} against {load})"
    return None


def _one(rec: dict[str, Any], manifest: dict[str, Any], names: list[str],
         counts: tuple[tuple[int, ...], bool] | None) -> str | None:
    """What a record alone contradicts in the manifest, or None."""
    kind, inst = rec.get("kind"), rec.get("instance")
    if "instance" in rec and names and inst not in names:
        return f"its instance {str(inst)[:40]!r} is not one of the run's ({', '.join(names)[:80]})"
    conns = rec.get("connections")
    if kind in POINTS and counts is not None and isinstance(conns, int) and not isinstance(conns, bool):
        listed, ladder = counts
        if not (min(listed) <= conns <= max(listed) if ladder else conns in listed):
            said = manifest["config"]["sweep"]["connections"]
            return f"connections {conns} is not a count the run's sweep measures (sweep.connections {said[:60]!r})"
    load = manifest.get("config", {}).get("load")
    percents = load.get("percents") if isinstance(load, dict) else None
    if kind == "load" and isinstance(percents, list) and rec.get("percent") not in percents:
        return f"its percent {str(rec.get('percent'))[:20]} is not one of the run's load.percents {percents!s:.60}"
    host, guest = rec.get("host"), manifest.get("guest")
    if isinstance(host, dict) and host.get("kvm_exits") and isinstance(guest, dict) and guest.get("kvm") is False:
        return "it counts VM exits, but manifest.json says the guests ran under TCG (guest.kvm false)"
    return _shorter(rec) if kind == "syscalls" else None


def _dropped(rec: dict[str, Any], manifest: dict[str, Any], measured: dict[str, set[int]]) -> str | None:
    """A study's switch found to change nothing drops study instances before they are measured, and the
    plan offers none of their points again (experiment/runner.py): one measured after it contradicts it."""
    inst, it = rec.get("instance"), rec.get("iteration")
    study = manifest.get("config", {}).get("study")
    switches = study.get("switches") if isinstance(study, dict) else None
    hosts = study.get("host_switches") if isinstance(study, dict) else None
    host = isinstance(inst, str) and isinstance(hosts, list) and inst in {f"{HOST_STUDIED}{h}" for h in hosts}
    if not isinstance(inst, str) or not (host or (switches and (inst.startswith(STUDIED) or inst == "all-off"))):
        return f"the run has no study instance {str(inst)[:40]!r} to drop"
    # the leave-one-out instance is dropped at its own boot (a host switch's at its own host boot), before
    # measuring; a stand-in may have been measured earlier in the same iteration
    own = inst.startswith(("no-", HOST_STUDIED))
    after = [i for i in measured.get(inst, set()) if isinstance(it, int) and (i >= it if own else i > it)]
    if after:
        return f"{inst!r} was measured in iteration {max(after)}, after it was dropped in iteration {it}"
    return None


def faults(manifest: dict[str, Any], kept: Kept) -> list[tuple[int, Fault]]:
    """The kept records that contradict the run, by line number."""
    names, counts = instance_names(manifest), _counts(manifest)
    measured: dict[str, set[int]] = {}
    for _, r in kept:
        if r.get("kind") in KEYED and r.get("ok") is True and isinstance(r.get("iteration"), int):
            measured.setdefault(str(r.get("instance")), set()).add(r["iteration"])
    out = []
    for n, r in kept:
        why = _one(r, manifest, names, counts) or (_dropped(r, manifest, measured) if r.get("kind") == "dropped"
                                                   else None)
        if why is not None:
            out.append((n, Fault(CONTRA, why)))
    return out


def missing(manifest: dict[str, Any], kept: Kept) -> list[str]:
    """What the manifest says was recorded and the records do not hold, a sentence each."""
    out = []
    tally = manifest.get("tally")
    done = sum(1 for _, r in kept if r.get("kind") in KEYED and r.get("ok") is True)
    ok = tally.get("ok") if isinstance(tally, dict) else None
    if isinstance(ok, int) and not isinstance(ok, bool) and ok > done:  # a resumed run's tally counts its last part
        out.append(f"manifest.json's tally counts {ok} points measured, and the records hold {done}: "
                   f"{ok - done} missing (deleted or cut); the figures are those of the points left")
    control, names = manifest.get("config", {}).get("control"), instance_names(manifest)
    if isinstance(manifest.get("guest"), dict) and isinstance(control, dict) and control.get("cap") and names:
        base = names[0]
        boots = sorted({r["iteration"] for _, r in kept if r.get("kind") == "session" and r.get("instance") == base
                        and r.get("ok") is True and isinstance(r.get("iteration"), int)})
        idle = {r.get("iteration") for _, r in kept if r.get("kind") == "idle" and r.get("instance") == base}
        if gone := [i for i in boots if i not in idle]:
            out.append(f"no idle record of {base}'s boot(s) in iteration {', '.join(map(str, gone))} (a run with a "
                       "control takes one in each): the control's expectation and the work per request subtract "
                       + ("the vCPUs' time without load of the other boots" if len(gone) < len(boots) else
                          "no time without load from the vCPUs' time"))
    return out


def settle(manifest: dict[str, Any], kept: Kept, left: list[tuple[int, dict[str, Any], Fault]], path: Path,
           strict: bool) -> tuple[list[dict[str, Any]], list[tuple[int, str, str]], list[str]]:
    """The records that count, those left out of every figure (line, why, what: record_check's and the
    contradictions, in file order) and what the records lack; with `strict` the first left out is an error
    naming `path` and its line."""
    by_line = dict(kept)
    left = sorted([*left, *((n, by_line[n], bad) for n, bad in faults(manifest, kept))], key=lambda x: x[0])
    if strict and left:
        n, rec, bad = left[0]
        raise HarnessError(f"{path} line {n}: {record_check.describe(rec, bad)}", "without --strict the report "
                           "leaves such a record out of every figure, and its first warning says so")
    gone = {n for n, _, _ in left}
    counted = [(n, r) for n, r in kept if n not in gone]
    return ([r for _, r in counted], [(n, bad.why, record_check.describe(rec, bad)) for n, rec, bad in left],
            missing(manifest, counted))
