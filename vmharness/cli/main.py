"""The `vmharness` command: the top-level parser, each command group's parsers (cli/host.py, guest.py,
bench.py, run.py, tune.py, report.py, campaign.py) under it, and the dispatch: every error a one-line
message with its hint, every signal an unwinding with the exit status it asks for.

A command imports its own group's module alone (`GROUPS`): the whole harness took 0.9 s to import on
a quiet 2-core machine and 8-10 s in the test rig's L1 under TCG, where a `host-restore` spent most of
its 14 s importing numpy, libvirt and the report's code it never used. `vmharness --help`, and any word
that names no command, builds the whole parser."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from vmharness import __version__, signals, textsafe
from vmharness.errors import HarnessError
from vmharness.signals import terminate_as_interrupt


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


GROUPS = {
    "host": ("host-check", "host-groups", "host-snapshot", "host-prepare", "host-restore", "host-setup"),
    "guest": ("image", "vm"),
    "bench": ("bench",),
    "run": ("run",),
    "tune": ("tune",),
    "report": ("report", "compare"),
    "campaign": ("campaign",),
}
"""Each module under vmharness/cli/ and the commands its `register` adds, in `--help`'s order
(tests/unit/test_help.py holds each module to its names)."""


def _group_of(words: Sequence[str]) -> str | None:
    """The group whose module the words' command needs: the first word that is not an option (the
    top-level options take no value); None for none, for an unknown word (the whole parser says why)
    and after a top-level --help or --version (they speak of every command)."""
    for word in words:
        if word in ("-h", "--help", "--version"):
            return None
        if not word.startswith("-"):
            return next((group for group, names in GROUPS.items() if word in names), None)
    return None


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


def build_parser(group: str | None = None) -> argparse.ArgumentParser:
    """The command's parser: every group's commands, or `group`'s alone."""
    parser = Parser(prog="vmharness", description="Measure what mitigations cost a webserver in a KVM guest.")
    parser.add_argument("--version", action="version", version=f"vmharness {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every command run")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in GROUPS if group is None else (group,):
        importlib.import_module(f"vmharness.cli.{name}").register(subs, _add)
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
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` is a command for the guest (`vm exec NAME -- argv...`), split off
    # here because argparse cannot tell it from a positional once the name has been matched.
    tail: list[str] | None = None
    if "--" in words:
        cut = words.index("--")
        words, tail = words[:cut], words[cut + 1:]
    parser = build_parser(_group_of(words))
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
