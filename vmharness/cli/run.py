"""`vmharness run`: the whole experiment in guests, then its report."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vmharness.bench import machines, server
from vmharness.cli.live import live_root
from vmharness.errors import HarnessError
from vmharness.host.prepare import show_plan
from vmharness.journal import journal
from vmharness.progress import say
from vmharness.system.root import HostRoot

if TYPE_CHECKING:
    from vmharness.experiment import hostrun, preflight
    from vmharness.model.sections import RunConfig
    from vmharness.rundir.store import RunDir

# The run's own modules are imported when it runs: through bench/ and analysis/ they bring scipy.special
# (about 200 ms of CPU to import), matplotlib (about 300 ms more), numpy and libvirt's bindings, which the
# other commands and `--help` do not need (the preflight, run --print-xml, imports scipy only to compute).


def _flags(args: argparse.Namespace) -> preflight.Flags:
    from vmharness.experiment import preflight  # scipy, libvirt: see the note at the top

    return preflight.Flags(config=Path(args.config) if args.config else None, bdf=tuple(args.bdf),
                           hugepages=args.hugepages, address=args.address, client_address=args.client_address,
                           control=args.control)


def _print_xml(args: argparse.Namespace) -> int:
    """The preflight, read from the live host or a host root, changing nothing: the host plan the run
    would carry out (as `host-prepare --dry-run` prints it) and each instance's domain as it would be
    defined once that plan is done."""
    from vmharness.experiment import cpucheck, preflight  # scipy, libvirt: see the note at the top
    from vmharness.experiment.hostboots import show as hostboots_show

    root = HostRoot.open(args.host_root)
    choice = preflight.choose(root, _flags(args))
    cpucheck.preflight(root, choice.cfg, say)  # a refusal is the only line
    say(choice.line)
    after = preflight.host_plan(root, choice.cfg)
    print(show_plan.plan_text(after, dry_run=True) if after is not None else
          "host-prepare plan: nothing to prepare (no NIC to pass through, no hugepages)")
    for line in hostboots_show.lines(root, choice.cfg):
        print(line)
    for dom in preflight.domains(root, choice.cfg, after):
        for note in dom.notes:
            print(f"note: {dom.instance}: {note}", file=sys.stderr)
        print(f"<!-- instance {dom.instance} -->")
        if dom.knobs:
            print(f"<!-- {dom.knobs} -->")
        print(dom.xml, end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from vmharness.experiment import cpucheck, hostrun, preflight, runfolder, runner, wire_check
    from vmharness.experiment.hostboots import plan as hostboots_plan
    from vmharness.rundir.store import REPORT, RunDir, check_new

    given = [name for name, on in (("CONFIG", args.config), ("--out", args.out is not None), ("--bdf", args.bdf),
                                   ("--hugepages", args.hugepages), ("--address", args.address is not None),
                                   ("--client-address", args.client_address is not None),
                                   ("--control", args.control), ("--print-xml", args.print_xml)) if on]
    if args.resume and given:
        raise HarnessError(f"--resume takes the configuration from the run directory, not {', '.join(given)}",
                           f"drop {', '.join(given)} when resuming")
    if args.print_xml:
        return _print_xml(args)
    root = live_root(args.host_root, "run", "drop --host-root (and VMHARNESS_HOST_ROOT), or add --print-xml to "
                     "see what the run would define")
    if args.resume:
        from vmharness.analysis import publish  # matplotlib: see the note at the top

        publish.preflight(Path(args.resume) / REPORT, f"--resume {args.resume}:")  # written at the end: said now
        run = RunDir.resume(Path(args.resume), "run")
        choice = preflight.resumed(root, run.manifest["config"])
        client_name = "guest.client_address"
        gone_round = hostrun.finished(run)
    else:
        gone_round = False
        choice = preflight.choose(root, _flags(args))
        client_name = "--client-address" if args.client_address is not None else "guest.client_address"
    out = Path(args.resume or args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S"))
    # host boots: consent, kexec, each host boot's files and a run folder that outlives a boot, before
    # anything is taken
    boots = hostboots_plan.needs_host_boots(choice.cfg) and not gone_round
    ready = hostrun.preflight(root, choice.cfg, args.allow_host_reboot, out, bool(args.resume),
                              args.keep_host) if boots else None
    qemus = cpucheck.preflight(root, choice.cfg, say)  # a refusal is the only line
    say(choice.line)
    cfg = choice.cfg
    server.check_configs(cfg.instance)
    held = wire_check.check_wire(cfg, client_name)
    if not args.resume:
        check_new(out, "--out")
    machines.check_clients(cfg.client)  # after every check of the input alone: it starts wrk on each client
    # the report's modules before the run (an install that cannot import them fails now, not after it),
    # yet after every check of the input, which an error then reaches in a fraction of the time;
    # matplotlib only for a report that draws: in the rig's L1 under TCG its import took 14 s of each
    # `run`, 8.9 s all the rest (docs/testing.md), and a run with host boots imports it in every boot
    if cfg.report.figures:
        from vmharness.analysis import plots as _figures  # noqa: F401 - matplotlib, which the report draws with
    from vmharness.analysis import publish, report, saturation  # scipy: see the note at the top

    with journal.Lock(root) as lock:
        if not args.resume:
            run = runfolder.new_run(cfg, out, {**choice.to_json(), "client_address_on": list(held) if held else None})
        cpucheck.record(run, qemus)
        say(f"run directory: {run.path}")
        if gone_round:  # each point was measured in its own host boot: none is measured in this one
            say("its host boots were all gone round: nothing is measured again; the report is written anew")
            tally = {"failed": len(_failed(run))}
        elif ready is None:
            tally = runner.Runner(cfg, run, root, say).execute(keep_host=args.keep_host)
        elif _host_boots(root, cfg, run, ready, lock) == "switched":
            return 0  # the host was told to boot the next kernel: the boot unit's `run --resume` goes on
        else:
            tally = {"failed": len(_failed(run))}
    analysis = saturation.analyse(run)
    written = publish.publish(analysis, run.path / REPORT, title=f"vmharness run: {run.path.name}", flag="the report",
                              figures=cfg.report.figures)
    if args.json:
        print(json.dumps({"run_dir": str(run.path), **report.to_json(analysis)}, indent=2, sort_keys=True))
    else:
        beside = ("and the figures beside it" if cfg.report.figures else
                  f"beside it; [report] figures = false: `vmharness report {run.path} --out DIR` draws them")
        print(report.short(analysis, [f"records: {run.path}/records.jsonl; failed points: {tally['failed']}",
                                      f"the full text: {written[0]}",
                                      f"report: {written[-1]} (and report.md, .csv, .json {beside})"]))
    return 1 if tally["failed"] or analysis.peak is None else 0


def _host_boots(root: HostRoot, cfg: RunConfig, run: RunDir, ready: hostrun.Prepared, lock: journal.Lock) -> str:
    """Go round the host boots (experiment/hostrun.py), detached from the terminal first."""
    from vmharness.experiment import hostrun
    from vmharness.experiment.hostboots import kexec

    hostrun.detach(root, run)
    os.ftruncate(lock.fd, 0)
    os.pwrite(lock.fd, f"{os.getpid()}\n".encode(), 0)  # the lock is this process's now
    return hostrun.go(root, cfg, run, say, kexec.Real(root), ready,
                      hostrun.measure_with(cfg, run, root, say, {"ok": 0, "failed": 0}))


def _failed(run: RunDir) -> set[str]:
    """The points of the whole run that failed and were not measured since."""
    from vmharness.rundir.store import POINTS

    return {r["key"] for r in run.records() if r.get("kind") in POINTS and r.get("ok") is False} - run.completed()


# what `run` with no CONFIG does, said from data/default-run.toml (tests/unit/test_help.py holds the two together)
SUMMARY = ("the whole experiment: prepare the host, boot each instance's guest, tune, sweep wrk load over nginx in it, "
           "restore the host, report (no CONFIG: a small built-in study on this machine)")
BUILT_IN = ("The built-in study runs under TCG: the reference `on` (the kernel's mitigations, pti=on) against each "
            "switch turned off (no-pti, no-spec_store_bypass_disable), with a positive control (its vCPU capped to "
            "50% of a CPU: a cost known in advance), latency at fixed rates, and the server's system calls and "
            "profile counted to explain each cost. It prints the answer's table first; the report's folder holds "
            "the rest.")
SECTIONS = ("[[instance]] (cmdline, qemu, kvm_modules, host_boot; [instance.host]: host knobs set while its guest "
            "runs), [[host_boot]] (a host kernel and its cmdline, booted with kexec: --allow-host-reboot), [study] "
            "(switches, host_switches: which mitigation costs what, in the guest or on the host), [explain] "
            "(syscalls, profile: why it costs), [control], [sweep], [load], [guest], [tuning].")


def register(subs: Any, add: Any) -> None:
    p = add(subs, "run", cmd_run,
            SUMMARY, "vmharness host-prepare --bdf 0000:b3:00.0 --hugepages 8G; then: vmharness run --hugepages")
    p.description = f"{SUMMARY}. {BUILT_IN} A CONFIG's tables (docs/run.md): {SECTIONS}"
    p.add_argument("config", nargs="?", metavar="CONFIG",
                   help="TOML experiment (docs/run.md); default: the built-in study (data/default-run.toml)")
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
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run (or a run with host boots after "
                   "each boot: its systemd unit runs this): measure only what is missing")
    p.add_argument("--keep-host", action="store_true",
                   help="leave what the run prepared (vfio-pci, hugepages) for the next run; host-restore undoes it")
    p.add_argument("--allow-host-reboot", action="store_true",
                   help="a CONFIG with [[host_boot]] reboots the host (kexec) between its host boots, which ends "
                        "every session and guest on it: allow it (without it, run refuses and says what it would "
                        "end); the run detaches, says how to follow it, and goes on after each boot")
    p.add_argument("--print-xml", action="store_true",
                   help="preflight, changing nothing: print the host plan and each instance's domain XML, and "
                        "stop (works with --host-root on a snapshot)")
