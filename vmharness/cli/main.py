"""The `vmharness` command: parse, call one function, render."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from vmharness import __version__, digits, signals, textsafe
from vmharness.cli import bench as cli_bench
from vmharness.cli import guest as cli_guest
from vmharness.cli import report as cli_report
from vmharness.cli import run as cli_run
from vmharness.cli import tune as cli_tune
from vmharness.errors import HarnessError
from vmharness.model.bdf import parse_bdf
from vmharness.model.schema import choices
from vmharness.model.sections import HugepageSize
from vmharness.progress import say
from vmharness.signals import terminate_as_interrupt
from vmharness.system.root import HostRoot

# Each command imports what it uses when it runs: under TCG (the test rig) every module costs a
# noticeable part of a second, and a command should not pay for the others.


class Done(Exception):
    """--help or --version was printed: the command ends here with this code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise HarnessError(message, f"see `{self.prog} --help`")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message, end="", file=sys.stderr)
        raise Done(status)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of `parser`'s subcommands by name (empty for a command that has none)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser the words selected (`vmharness vm` -> vm's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest or "", None):
            return _chosen(action.choices[getattr(args, action.dest)], args)
    return parser


def _emit(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _where(root: HostRoot) -> str:
    return "the live host" if root.live else f"host root {root.base}"


def cmd_host_check(args: argparse.Namespace) -> int:
    from vmharness.host.inspect import show
    from vmharness.host.inspect.hostcheck.facts import FAIL
    from vmharness.host.inspect.hostcheck.rows import run_checks

    root = HostRoot.open(args.host_root)
    results = run_checks(root)
    failed = any(c.status == FAIL for c in results)
    if args.json:
        _emit({"checks": [c.to_json() for c in results], "ok": not failed})
    else:
        print(show.checks_text(results, _where(root)))
    return 1 if failed else 0


def _class_filter(text: str | None) -> int | None:
    from vmharness.host.inspect import pciids

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
    from vmharness.host.inspect import iommu, pci, show

    wanted_class = _class_filter(args.device_class)
    bdf = parse_bdf(args.bdf, "--bdf") if args.bdf is not None else None
    root = HostRoot.open(args.host_root)
    only = pci.find(root, bdf) if bdf is not None else None
    views = iommu.device_views(root, pci.scan(root))
    groups = iommu.groups(root, views)
    grouped = {m.dev.bdf for g in groups for m in g.members}
    ungrouped = [v for v in views if v.dev.bdf not in grouped]
    if only is not None:
        groups = [g for g in groups if any(m.dev.bdf == only.bdf for m in g.members)]
        ungrouped = [v for v in ungrouped if v.dev.bdf == only.bdf]
    if wanted_class is not None:
        groups = [g for g in groups if any(m.dev.base_class == wanted_class for m in g.members)]
        ungrouped = [v for v in ungrouped if v.dev.base_class == wanted_class]
    if args.json:
        _emit({
            "iommu_enabled": bool(iommu.groups(root, views)),
            "groups": [g.to_json() for g in groups],
            "ungrouped": [v.to_json() for v in ungrouped],
        })
    else:
        print(show.groups_text(groups, ungrouped))
    return 0


def cmd_host_snapshot(args: argparse.Namespace) -> int:
    from vmharness.host.snapshot import file, snapshot

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


def cmd_host_prepare(args: argparse.Namespace) -> int:
    from vmharness.host.prepare import plan, prepare, show_plan
    from vmharness.journal import journal

    request = plan.Request(tuple(args.bdf), args.hugepages, args.hugepage_size, args.node, args.force)
    root = HostRoot.open(args.host_root)
    if args.dry_run:
        the_plan = plan.make(root, request)
        if args.json:
            _emit(the_plan.to_json())
        else:
            print(show_plan.plan_text(the_plan, dry_run=True))
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
    from vmharness.experiment import ops  # every subsystem's journal ops: no record looks unknown
    from vmharness.host.prepare import show_plan
    from vmharness.journal import journal, restore

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
    from vmharness.host.prepare import plan, setup

    if not args.print:
        raise HarnessError("host-setup only prints (it never edits boot files): --print is required", "add --print")
    request = plan.Request(tuple(args.bdf), args.hugepages, args.hugepage_size, args.node, args.force)
    root = HostRoot.open(args.host_root)
    print(setup.render(root, request))
    return 0


Command = Callable[[argparse.Namespace], int]


def _add(
    subs: Any, name: str, func: Command, summary: str, example: str, json_flag: bool = True
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subs.add_parser(
        name, help=summary.replace("%", "%%"), description=summary, epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host-root", metavar="DIR",
                   help="inspect a directory laid out like / (an unpacked host-snapshot) instead of this "
                        "host; also VMHARNESS_HOST_ROOT")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=func)
    return p


def _prepare_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bdf", action="append", default=[], help="a device to pass through (repeatable)")
    p.add_argument("--hugepages", metavar="SIZE", help="memory to have free in hugepages, e.g. 8G")
    p.add_argument("--hugepage-size", default="2M", choices=choices(HugepageSize), help="page size (default 2M)")
    p.add_argument("--node", default="auto", help="NUMA node for the pages: auto (the NIC's node) or a number")
    p.add_argument("--force", action="store_true", help="take a NIC even though it holds a route or an address")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="vmharness", description="Measure what mitigations cost a webserver in a KVM guest.")
    parser.add_argument("--version", action="version", version=f"vmharness {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every command run")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    _add(subs, "host-check", cmd_host_check,
         "check that this host can pass a NIC through to a KVM guest (exit 1 if a check FAILs)",
         "vmharness host-check --json")
    p = _add(subs, "host-groups", cmd_host_groups,
             "list IOMMU groups, their devices, and whether each can go to VFIO whole",
             "vmharness host-groups --class network")
    p.add_argument("--bdf", help="only the group of this device (DDDD:BB:DD.F or BB:DD.F)")
    p.add_argument("--class", dest="device_class", metavar="CLASS",
                   help="only groups holding a device of this class (network, storage, display, ... or hex)")
    p = _add(subs, "host-snapshot", cmd_host_snapshot,
             "write what host-check and host-groups read to a small tarball for diagnosis elsewhere",
             "vmharness host-snapshot myhost.tar.gz", json_flag=False)
    p.add_argument("out", metavar="OUT.tar.gz", help="the tarball to write; - writes it to stdout (not a terminal)")
    p.add_argument("--force", action="store_true", help="replace an existing file that is not a snapshot "
                   "vmharness wrote, or a link (never writing through it)")
    p = _add(subs, "host-prepare", cmd_host_prepare,
             "bind a NIC and its whole IOMMU group to vfio-pci and reserve hugepages on its NUMA node "
             "(journaled; undo with host-restore)",
             "vmharness host-prepare --bdf 0000:b3:00.0 --hugepages 8G --hugepage-size 1G --dry-run")
    _prepare_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    p = _add(subs, "host-restore", cmd_host_restore,
             "undo everything host-prepare journaled, newest first (also after a crash)",
             "vmharness host-restore --dry-run", json_flag=False)
    p.add_argument("--dry-run", action="store_true", help="print what would be undone")
    p = _add(subs, "host-setup", cmd_host_setup,
             "print the persistent configuration (kernel cmdline, modprobe.d, udev rule) that makes a "
             "host-prepare survive reboots", "vmharness host-setup --print --bdf 0000:b3:00.0 --hugepages 8G "
             "--hugepage-size 1G", json_flag=False)
    _prepare_options(p)
    p.add_argument("--print", action="store_true", help="print the files' contents (the only mode)")
    cli_guest.register(subs, _add)
    cli_bench.register(subs, _add)
    cli_run.register(subs, _add)
    cli_tune.register(subs, _add)
    cli_report.register(subs, _add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command, every signal that would end the process unwinding it instead (every rollback runs),
    from the first word parsed to the last line printed; the first signal sets the exit status."""
    with terminate_as_interrupt(keep=argv is None), textsafe.terminal(keep=argv is None):
        try:
            code = _main(argv)
            signals.disarm()
        except KeyboardInterrupt as exc:  # the first signal, just as the command ended
            signals.disarm()
            signals.note(getattr(exc, "signum", signal.SIGINT))
            code = 0
        return signals.status(code)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` is a command for the guest (`vm exec NAME -- argv...`), split off
    # here because argparse cannot tell it from a positional once the name has been matched.
    tail: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, tail = words[:cut], words[cut + 1:]
    try:
        args = parser.parse_args(words)
        if tail is not None:
            if not hasattr(args, "argv"):
                raise HarnessError("this command takes nothing after --", f"see `vmharness {args.command} --help`")
            args.argv = tail
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                            format="%(name)s: %(message)s")
        if not getattr(args, "func", None):  # `vmharness`, `vmharness vm`: what is there to do
            _chosen(parser, args).print_help()
            return 0
        code: int = args.func(args)
        return code
    except Done as done:
        return done.code
    except HarnessError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # a signal (signals.Interrupted): signals.status says which
        signals.note(getattr(exc, "signum", signal.SIGINT))
        return 0
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as cat does
        signals.quiet_stdout()
        return 141


if __name__ == "__main__":
    sys.exit(main())
