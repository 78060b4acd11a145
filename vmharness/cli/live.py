"""The live host for a command that changes it. `--host-root` (or VMHARNESS_HOST_ROOT) names a tree
laid out like / that is only ever read: a command that would write into it (a lock, a journal) or act
on the live host while the user believes it works on a snapshot refuses it instead."""

from __future__ import annotations

from vmharness.errors import HarnessError
from vmharness.system.root import ENV_VAR, HostRoot


def live_root(host_root: str | None, command: str, hint: str) -> HostRoot:
    root = HostRoot.open(host_root)
    if not root.live:
        where = "--host-root" if host_root is not None else ENV_VAR
        raise HarnessError(f"{command} changes the live host, so it does not work on a host root ({where} "
                           f"{root.base})", hint)
    return root
