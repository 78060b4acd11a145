"""The host's state in the manifest (host/inspect/hoststate.py), at a run's start and at its end:
`host_state.start` once (a resumed run keeps the first), `host_state.end` at each end. A change between
the two (a KVM parameter written by hand, SMT switched off, a reboot before `--resume`) is said at the
end and is the report's warning. Only where the guests run on this machine: another's is not read."""

from __future__ import annotations

from vmharness import progress
from vmharness.host.inspect import hoststate
from vmharness.rundir.store import RunDir
from vmharness.system.machine import for_uri
from vmharness.system.root import HostRoot

KEY = "host_state"


def start(run: RunDir, root: HostRoot, uri: str) -> None:
    if for_uri(uri).local and KEY not in run.manifest:
        run.update_manifest(**{KEY: {"start": hoststate.read(root), "end": None}})


def end(run: RunDir, root: HostRoot, uri: str, say: progress.Say) -> None:
    recorded = run.manifest.get(KEY)
    if not for_uri(uri).local or not isinstance(recorded, dict) or not isinstance(recorded.get("start"), dict):
        return
    now = hoststate.read(root)
    run.update_manifest(**{KEY: {**recorded, "end": now}})
    try:
        changed = hoststate.differences(recorded["start"], now)
    except (KeyError, TypeError, AttributeError):  # a start damaged since: the report names it
        return
    if changed:
        say("WARNING: the host changed during the run: " + "; ".join(changed.values()))
