"""`vmharness run`: the whole experiment in guests, then its report."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vmharness.cli.live import live_root
from vmharness.errors import HarnessError
from vmharness.progress import say
from vmharness.system.root import HostRoot

if TYPE_CHECKING:
    from vmharness.experiment.hostprep import Choice


def _flag_address(value: str | None, flag: str) -> str | None:
    from vmharness.model import config

    if value is not None and not value:
        raise HarnessError(f"{flag} is empty", f"write an address with its prefix, e.g. {config.DEFAULT_ADDRESS}")
    return None if value is None else config.check_address(value, flag)


def _choice(args: argparse.Namespace, root: HostRoot) -> Choice:
    """The configuration file (or the embedded experiment) with the flags on top, and where its NIC and
    hugepages come from (the flags, the file, or what host-prepare set up); each flag checked by name."""
    from vmharness.experiment import hostprep
    from vmharness.model import config
    from vmharness.model.bdf import parse_bdf

    cfg = config.load_run(Path(args.config) if args.config else None)
    guest = cfg.guest
    if args.bdf:
        guest = dataclasses.replace(guest, bdf=tuple(parse_bdf(b, "--bdf") for b in args.bdf))
    if args.hugepages:
        guest = dataclasses.replace(guest, hugepages=True)
    address = _flag_address(args.address, "--address")
    client = _flag_address(args.client_address, "--client-address")
    guest = dataclasses.replace(guest, address=guest.address if address is None else address,
                                client_address=guest.client_address if client is None else client)
    cfg = dataclasses.replace(cfg, guest=guest)
    if args.control and not cfg.control.cap:
        cfg = config.with_control(dataclasses.replace(cfg, control=dataclasses.replace(
            cfg.control, cap=config.CONTROL_CAP)), "--control")
    given = hostprep.Given(bdf=bool(args.bdf), address=address is not None, client_address=client is not None)
    choice = hostprep.choose(root, cfg, given)
    config.validate(choice.cfg)
    return choice


def _print_xml(choice: Choice, root: HostRoot) -> int:
    """Preflight, read from `root` (the live host or a host root), changing nothing: the host plan the
    run would carry out (as `host-prepare --dry-run` prints it) and each instance's domain as it would
    be defined once that plan is done."""
    from vmharness.bench import bench
    from vmharness.experiment import cpucheck, hostprep
    from vmharness.guest import domain, instance, session
    from vmharness.host.prepare import plan, show_plan
    from vmharness.journal import journal

    cfg = choice.cfg
    cpucheck.preflight(root, cfg, say)  # a refusal is the only line
    say(choice.line)
    req = hostprep.request(cfg)
    after = plan.make(root, req) if req is not None else None
    print(show_plan.plan_text(after, dry_run=True) if after is not None else
          "host-prepare plan: nothing to prepare (no NIC to pass through, no hugepages)")
    owner = journal.RUN_PREFIX + bench.new_id()
    for inst in cfg.instance:
        planned = instance.plan(root, session.request(cfg, inst, owner), for_print=True, after=after)
        for note in planned.notes:
            print(f"note: {inst.name}: {note}", file=sys.stderr)
        print(f"<!-- instance {inst.name} -->")
        print(domain.to_xml(planned.spec), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from vmharness.analysis import publish, report, saturation
    from vmharness.bench import server
    from vmharness.experiment import cpucheck, hostprep, runner
    from vmharness.journal import journal
    from vmharness.model import config
    from vmharness.rundir.store import REPORT, RunDir, check_new

    given = [name for name, on in (("CONFIG", args.config), ("--out", args.out is not None), ("--bdf", args.bdf),
                                   ("--hugepages", args.hugepages), ("--address", args.address is not None),
                                   ("--client-address", args.client_address is not None),
                                   ("--control", args.control), ("--print-xml", args.print_xml)) if on]
    if args.resume and given:
        raise HarnessError(f"--resume takes the configuration from the run directory, not {', '.join(given)}",
                           f"drop {', '.join(given)} when resuming")
    if args.print_xml:
        root = HostRoot.open(args.host_root)
        return _print_xml(_choice(args, root), root)
    root = live_root(args.host_root, "run", "drop --host-root (and VMHARNESS_HOST_ROOT), or add --print-xml to "
                     "see what the run would define")
    if args.resume:
        publish.preflight(Path(args.resume) / REPORT, f"--resume {args.resume}:")  # written at the end: said now
        run = RunDir.resume(Path(args.resume), "run")
        choice = hostprep.choose(root, config.validate(config.run_from_json(run.manifest["config"])),
                                 hostprep.Given(resumed=True))
        client_name = "guest.client_address"
    else:
        choice = _choice(args, root)
        client_name = "--client-address" if args.client_address is not None else "guest.client_address"
    cpucheck.preflight(root, choice.cfg, say)
    say(choice.line)
    cfg = choice.cfg
    server.check_configs(cfg.instance)
    held = runner.check_wire(cfg, client_name)
    out = Path(args.out) if args.out is not None else Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    if not args.resume:
        check_new(out, "--out")
    with journal.Lock(root):
        if not args.resume:
            run = runner.new_run(cfg, out, {**choice.to_json(), "client_address_on": list(held) if held else None})
        say(f"run directory: {run.path}")
        tally = runner.Runner(cfg, run, root, say).execute(keep_host=args.keep_host)
    analysis = saturation.analyse(run)
    written = publish.publish(analysis, run.path / REPORT, title=f"vmharness run: {run.path.name}", flag="the report")
    if args.json:
        print(json.dumps({"run_dir": str(run.path), **report.to_json(analysis)}, indent=2, sort_keys=True))
    else:
        print(report.text(analysis))
        print(f"\nrecords: {run.path}/records.jsonl; failed points: {tally['failed']}")
        print(f"report: {written[-1]} (and report.md, .csv, .json and the figures beside it)")
    return 1 if tally["failed"] or analysis.peak is None else 0


def register(subs: Any, add: Any) -> None:
    p = add(subs, "run", cmd_run,
            "the whole experiment: prepare the host, boot each instance's guest, tune, sweep wrk load over "
            "nginx in it, restore the host, report (no CONFIG: a small built-in experiment on this machine)",
            "vmharness host-prepare --bdf 0000:b3:00.0 --hugepages 8G; then: vmharness run --hugepages")
    p.add_argument("config", nargs="?", metavar="CONFIG",
                   help="TOML experiment (docs/run.md); default: mitigations=off vs auto in a small TCG-friendly sweep")
    p.add_argument("--bdf", action="append", default=[],
                   help="pass this NIC through (repeatable; guest.bdf); none: the NICs host-prepare set up, if any")
    p.add_argument("--hugepages", action="store_true", help="guest memory on hugepages (guest.hugepages)")
    p.add_argument("--address", metavar="CIDR",
                   help="the guest's address on the passed-through NIC, where wrk connects (guest.address; "
                        "default 198.19.0.2/24)")
    p.add_argument("--client-address", metavar="CIDR",
                   help="the clients' address on that wire, held by a client machine (guest.client_address; "
                        "default 198.19.0.1/24)")
    p.add_argument("--control", action="store_true",
                   help="add a positive control: the baseline with its vCPUs capped to 50%% of a "
                        "CPU (control.cap sets another share), a cost known from the vCPU time the host sees, which "
                        "the report checks it recovers")
    p.add_argument("--out", metavar="DIR", help="the new run directory (default runs/run-DATE-TIME)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run: measure only what is missing")
    p.add_argument("--keep-host", action="store_true",
                   help="leave what the run prepared (vfio-pci, hugepages) for the next run; host-restore undoes it")
    p.add_argument("--print-xml", action="store_true",
                   help="preflight, changing nothing: print the host plan and each instance's domain XML, and "
                        "stop (works with --host-root on a snapshot)")
