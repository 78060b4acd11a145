"""The host commands (`host-check`, `host-groups`, `host-snapshot`, `host-prepare`, `host-restore`,
`host-setup`): each reads its flags into a request, calls host/ for it and prints the answer, as text
or, with --json, as one JSON document on stdout. Nothing here decides anything about the host."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from vmharness import digits
from vmharness.errors import HarnessError
from vmharness.host.inspect import iommu, pciids, show
from vmharness.host.inspect.hostcheck.facts import FAIL
from vmharness.host.inspect.hostcheck.rows import run_checks
from vmharness.host.prepare import knobs, plan, prepare, setup, show_plan
from vmharness.host.snapshot import file, snapshot
from vmharness.journal import journal, restore
from vmharness.model import config
from vmharness.model.bdf import parse_bdf
from vmharness.model.schema import choices
from vmharness.model.sections import HugepageSize
from vmharness.progress import say
from vmharness.system.root import HostRoot


def _emit(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _where(root: HostRoot) -> str:
    return "the live host" if root.live else f"host root {root.base}"


def cmd_host_check(args: argparse.Namespace) -> int:
    root = HostRoot.open(args.host_root)
    results = run_checks(root)
    failed = any(c.status == FAIL for c in results)
    if args.json:
        _emit({"checks": [c.to_json() for c in results], "ok": not failed})
    else:
        print(show.checks_text(results, _where(root)))
    return 1 if failed else 0


def _class_filter(text: str | None) -> int | None:
    if text is None:
        return None
    names = {v: k for k, v in pciids.BASE_CLASSES.items()}
    if text.lower() in names:
        return names[text.lower()]
    value = digits.hexadecimal(text)
    if value in pciids.BASE_CLASSES:
        return value
    raise HarnessError(
        f"unknown device class {text!r}",
        "use a name (" + ", ".join(sorted(names)[:6]) + ", ...) or a hex base class such as 02",
    )


def cmd_host_groups(args: argparse.Namespace) -> int:
    wanted_class = _class_filter(args.device_class)
    bdf = parse_bdf(args.bdf, "--bdf") if args.bdf is not None else None
    found = iommu.select(HostRoot.open(args.host_root), bdf, wanted_class)
    if args.json:
        _emit({
            "iommu_enabled": found.enabled,
            "groups": [g.to_json() for g in found.groups],
            "ungrouped": [v.to_json() for v in found.ungrouped],
        })
    else:
        print(show.groups_text(found.groups, found.ungrouped))
    return 0


def cmd_host_snapshot(args: argparse.Namespace) -> int:
    if not args.out.strip():
        raise HarnessError("OUT.tar.gz is empty", "name the tarball to write, e.g. myhost.tar.gz")
    root = HostRoot.open(args.host_root)
    if args.out == file.STDOUT:  # the tarball on stdout, what is said on stderr
        file.to_stdout(data := snapshot.build(root))
        print(f"wrote a snapshot ({len(data) / 1024:.1f} KiB) of {_where(root)} to stdout\ninspect it elsewhere: "
              "save it as host.tar.gz, then mkdir snap && tar xzf host.tar.gz -C snap && vmharness host-check "
              "--host-root snap", file=sys.stderr)
        return 0
    size = snapshot.write(root, Path(args.out), args.force)
    print(f"wrote {args.out} ({size / 1024:.1f} KiB) from {_where(root)}")
    print(f"inspect it elsewhere: mkdir snap && tar xzf {shlex.quote(args.out)} -C snap && vmharness host-check "
          "--host-root snap")
    return 0


def _live_only(root: HostRoot, command: str) -> None:
    if not root.live:
        raise HarnessError(f"{command} changes the live host; with --host-root only --dry-run works",
                           "drop --host-root, or add --dry-run")


def _request(args: argparse.Namespace) -> plan.Request:
    return plan.Request(tuple(args.bdf), args.hugepages, args.hugepage_size, args.node, args.force)


def _host_knobs(root: HostRoot, path: str | None) -> tuple[dict[str, list[dict[str, str]]], list[str]] | None:
    """Each instance's host knobs in the run configuration at `path`, checked on this host or snapshot
    as run checks them (knobs.plan: an error names the first instance and knob that cannot be set), for
    the JSON and as lines (with its host boots after them: experiment/hostboots/show.py); None without
    --config."""
    if path is None:
        return None
    cfg = config.load_run(Path(path))
    instances = cfg.instance
    shown = {i.name: [{"knob": s.key, "value": s.value, "now": s.now} for s in knobs.plan(root, i.name, i.host)]
             for i in instances if i.host}
    # numpy (through the rounds' plan): imported here, not with the command line, whose every command would
    # otherwise start numpy's threads before signals.py blocks SIGPIPE in them (a `kill -PIPE` then lost)
    from vmharness.experiment.hostboots import show as hostboots_show

    boots = hostboots_show.lines(root, cfg)  # each host boot's files checked here, as run checks them
    return shown, [*([knobs.preview(root, i.name, i.host, i.kvm_modules) for i in instances
                      if i.host or i.kvm_modules] or [f"host knobs: no instance in {path} sets any"]), *boots]


def cmd_host_prepare(args: argparse.Namespace) -> int:
    request = _request(args)
    root = HostRoot.open(args.host_root)
    if args.config is not None and not args.dry_run:
        raise HarnessError("--config is read only with --dry-run: run sets each instance's host knobs while its "
                           "guest runs and gives them back after it", "add --dry-run to see them, or drop --config")
    if args.dry_run:
        the_plan = plan.make(root, request)
        shown = _host_knobs(root, args.config)
        if args.json:
            _emit({**the_plan.to_json(), **({} if shown is None else {
                "host_knobs": shown[0], "host_boots": [b.strip() for b in shown[1] if b.startswith("  ")]})})
        else:
            print("\n".join([show_plan.plan_text(the_plan, dry_run=True), *(shown[1] if shown else [])]))
        return 0
    _live_only(root, "host-prepare")
    text = sys.stderr if args.json else sys.stdout  # with --json, stdout carries the plan's JSON only
    with journal.Lock(root):
        the_plan = plan.make(root, request)
        print(show_plan.plan_text(the_plan, dry_run=False), file=text, flush=True)
        if not the_plan.changes_nothing:
            prepare.execute(root, the_plan, say)
            print("prepared; undo with: vmharness host-restore", file=text)
    if args.json:
        _emit(the_plan.to_json())
    return 0


def cmd_host_restore(args: argparse.Namespace) -> int:
    # Every subsystem's journal ops, so that no record looks unknown. Imported here: through guest/vm.py
    # they bring libvirt's bindings (about 30 ms), which the other host commands do not need.
    from vmharness.experiment import ops

    root = HostRoot.open(args.host_root)
    if not args.dry_run:
        _live_only(root, "host-restore")
    with contextlib.nullcontext() if args.dry_run else journal.Lock(root):
        found = journal.load(root)
        if found.torn is not None:
            print(f"warning: {journal.JOURNAL}: the last line was cut mid-write (a crash); its change was "
                  f"never made, so it is dropped: {found.torn[:60]!r}", file=sys.stderr)
        pending = restore.pending(root)
        strange = restore.unknown_text(journal.unknown(found.records)) + restore.kept_text(found.records)
        print(show_plan.restore_text(pending), flush=True)
        problems = [] if args.dry_run or not pending else ops.undo_all(root, say)
        gone = ops.leftovers(root, args.dry_run)  # after the journal's undo, which removes a journaled one
    for line in gone:
        print(f"  {line}")
    for p in problems:
        print(f"  NOT RESTORED: {p}")
    for line in strange:
        print(f"  KEPT: {line}")
    if problems or strange:
        if not args.dry_run:
            print("the journal is kept: fix what is listed and run vmharness host-restore again")
        return 1
    if pending and not args.dry_run:
        print("restored: the host is as vmharness found it")
    return 0


def cmd_host_setup(args: argparse.Namespace) -> int:
    if not args.print:
        raise HarnessError("host-setup only prints (it never edits boot files): --print is required", "add --print")
    request = _request(args)
    print(setup.render(HostRoot.open(args.host_root), request))
    return 0


def _prepare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bdf", action="append", default=[], help="a device to pass through (repeatable)")
    p.add_argument("--hugepages", metavar="SIZE", help="memory to have free in hugepages, e.g. 8G")
    p.add_argument("--hugepage-size", default="2M", choices=choices(HugepageSize), help="page size (default 2M)")
    p.add_argument("--node", default="auto", help="NUMA node for the pages: auto (the NIC's node) or a number")
    p.add_argument("--force", action="store_true", help="take a NIC even though it holds a route or an address")


def register(subs: Any, add: Any) -> None:
    add(subs, "host-check", cmd_host_check,
        "check that this host can pass a NIC through to a KVM guest (exit 1 if a check FAILs)",
        "vmharness host-check --json")
    p = add(subs, "host-groups", cmd_host_groups,
            "list IOMMU groups, their devices, and whether each can go to VFIO whole",
            "vmharness host-groups --class network")
    p.add_argument("--bdf", help="only the group of this device (DDDD:BB:DD.F or BB:DD.F)")
    p.add_argument("--class", dest="device_class", metavar="CLASS",
                   help="only groups holding a device of this class (network, storage, display, ... or hex)")
    p = add(subs, "host-snapshot", cmd_host_snapshot,
            "write what host-check and host-groups read to a small tarball for diagnosis elsewhere",
            "vmharness host-snapshot myhost.tar.gz", json_flag=False)
    p.add_argument("out", metavar="OUT.tar.gz", help="the tarball to write; - writes it to stdout (not a terminal)")
    p.add_argument("--force", action="store_true", help="replace an existing file that is not a snapshot "
                   "vmharness wrote, or a link (never writing through it)")
    p = add(subs, "host-prepare", cmd_host_prepare,
            "bind a NIC and its whole IOMMU group to vfio-pci and reserve hugepages on its NUMA node "
            "(journaled; undo with host-restore)",
            "vmharness host-prepare --bdf 0000:b3:00.0 --hugepages 8G --hugepage-size 1G --dry-run")
    _prepare_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    p.add_argument("--config", metavar="CONFIG", help="with --dry-run: also the host knobs each instance of this "
                   "run configuration would set ([instance.host], set by run while its guest runs), checked here")
    p = add(subs, "host-restore", cmd_host_restore,
            "undo everything host-prepare journaled, newest first (also after a crash)",
            "vmharness host-restore --dry-run", json_flag=False)
    p.add_argument("--dry-run", action="store_true", help="print what would be undone")
    p = add(subs, "host-setup", cmd_host_setup,
            "print the persistent configuration (kernel cmdline, modprobe.d, udev rule) that makes a "
            "host-prepare survive reboots", "vmharness host-setup --print --bdf 0000:b3:00.0 --hugepages 8G "
            "--hugepage-size 1G", json_flag=False)
    _prepare_options(p)
    p.add_argument("--print", action="store_true", help="print the files' contents (the only mode)")
