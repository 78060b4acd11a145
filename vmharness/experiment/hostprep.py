"""What `vmharness run` takes on the host before its guests boot: the passed-through NICs moved to
vfio-pci with their IOMMU groups, and hugepages for the guest's memory on the NIC's node — the same
plan and journal as `host-prepare`, owned by the run. Whatever the host already had (an earlier
`host-prepare`) is left alone; what the run took is given back at its end, unless it is asked to
keep it: then it is handed over to `host-prepare`, so that no later run reclaims it as a dead run's."""

from __future__ import annotations

from collections.abc import Callable

from vmharness.config import RunConfig
from vmharness.errors import HarnessError
from vmharness.host import journal, plan, prepare, restore, show_plan
from vmharness.host.root import HostRoot
from vmharness.machine import for_uri

Say = Callable[[str], None]


def request(cfg: RunConfig) -> plan.Request | None:
    g = cfg.guest
    bdfs = () if g.managed else g.bdf
    pages = f"{g.memory}M" if g.hugepages else None
    if not bdfs and pages is None:
        return None
    if not for_uri(g.uri).local:
        raise HarnessError(f"guest.bdf and guest.hugepages are prepared on this machine, but the guests run at "
                           f"{g.uri}", "prepare that machine with `vmharness host-prepare` there and set "
                           "guest.managed, or run vmharness on the server machine")
    return plan.Request(bdfs, pages, g.hugepage_size, "auto")


HOST_OPS = ("bind", "pages", "mount", "modules")


def prepare_host(root: HostRoot, cfg: RunConfig, say: Say, owner: str) -> int | None:
    """Prepare what the run needs; returns the journal position to restore back to (None: nothing was
    changed). The caller holds the host lock."""
    req = request(cfg)
    if req is None:
        return None
    the_plan = plan.make(root, req)
    for line in show_plan.plan_text(the_plan, dry_run=False).splitlines():
        say(line.strip())
    if the_plan.changes_nothing:
        return None
    since = max((r["seq"] for r in journal.read(root)), default=0)
    prepare.execute(root, the_plan, say, owner)
    return since


def _taken(root: HostRoot, since: int, owner: str) -> list[int]:
    return [r["seq"] for r in journal.outstanding(journal.read(root))
            if r["seq"] > since and r["op"] in HOST_OPS and r.get("owner") == owner]


def keep_host(root: HostRoot, since: int, owner: str) -> None:
    """--keep-host: what the run prepared becomes host-prepare's, left for host-restore."""
    journal.hand_over(root, _taken(root, since, owner), "host-prepare")


def restore_host(root: HostRoot, since: int | None, say: Say) -> list[str]:
    """Give back what `prepare_host` took (journal records after `since`); returns the problems."""
    if since is None:
        return []
    return restore.undo(root, say, only=lambda rec: rec["seq"] > since and rec["op"] in HOST_OPS)
