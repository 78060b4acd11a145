"""Every command's help prints and exits 0: the parser tree is walked, so a command added later is
covered without touching this file (a stray `%` in any help string once broke `vmharness --help`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmharness.cli import main as cli_main
from vmharness.cli.main import build_parser, main, subcommands


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in subcommands(parser).items():
        yield from _commands(sub, (*path, name))


def _groups(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The commands that only hold other commands (`vmharness` itself, `vm`, `image`)."""
    subs = subcommands(parser)
    if subs:
        yield path
    for name, sub in subs.items():
        yield from _groups(sub, (*path, name))


COMMANDS = list(_commands(build_parser()))
GROUPS = list(_groups(build_parser()))


def test_the_walk_finds_the_nested_commands() -> None:
    assert {(), ("host-check",), ("vm",), ("vm", "up"), ("image", "build"), ("tune",)} <= set(COMMANDS)
    assert {(), ("vm",), ("image",)} <= set(GROUPS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "vmharness")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_prints_its_help_and_exits_0(cli, path: tuple[str, ...], flag: str) -> None:
    code, out, err = cli(*path, flag)
    assert (code, err) == (0, "")
    assert out.startswith(f"usage: vmharness {' '.join(path)}".rstrip())


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "vmharness")
def test_a_command_group_alone_prints_its_help_and_exits_0(cli, path: tuple[str, ...]) -> None:
    code, out, err = cli(*path)
    assert (code, err) == (0, "")
    assert out.startswith(f"usage: vmharness {' '.join(path)}".rstrip())
    assert "COMMAND" in out


def test_the_version_prints_and_exits_0(cli) -> None:
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("vmharness ")


def test_the_installed_command_prints_its_help() -> None:
    exe = Path(sys.executable).with_name("vmharness")
    done = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert "usage: vmharness" in done.stdout and "host-prepare" in done.stdout


def test_main_returns_rather_than_exits_on_help() -> None:
    assert main(["host-check", "--help"]) == 0


@pytest.mark.parametrize("argv", [("tune", "plan", "--help"), ("vm", "exec", "demo", "--help"),
                                  ("host-prepare", "--bdf", "zz", "--help")])
def test_help_after_other_words_still_prints_and_exits_0(cli, argv: tuple[str, ...]) -> None:
    code, out, err = cli(*argv)
    assert (code, err) == (0, "") and out.startswith("usage: vmharness")


def test_run_help_describes_the_built_in_experiment_as_its_configuration_has_it(cli) -> None:
    """`run` with no CONFIG runs data/default-run.toml: its help names that file's reference, each switch
    turned off, the control's cap and what it measures beside the sweep, and where a CONFIG's study,
    [explain] and host knobs are."""
    import tomllib

    code, out, _ = cli("run", "--help")
    said = " ".join(out.split())
    cfg = tomllib.loads((Path(__file__).parents[2] / "vmharness/data/default-run.toml").read_text())
    (ref,) = cfg["instance"]
    assert code == 0 and f"the reference `{ref['name']}`" in said and ref["cmdline"] in said
    assert "study" in said and all(f"no-{s}" in said for s in cfg["study"]["switches"])
    assert f"(its vCPU capped to {cfg['control']['cap']}% of a CPU" in said
    assert ("latency at fixed rates" in said) == ("load" in cfg)
    assert ("system calls" in said) == cfg["explain"]["syscalls"] and ("profile" in said) == cfg["explain"]["profile"]
    assert all(k in said for k in ("[study]", "[explain]", "[instance.host]: host knobs", "docs/run.md"))


@pytest.mark.parametrize("group", cli_main.GROUPS)
def test_each_group_module_adds_the_commands_named_for_it(group: str) -> None:
    assert tuple(subcommands(build_parser(group))) == cli_main.GROUPS[group]


def test_the_whole_parser_is_every_group_in_order() -> None:
    assert tuple(subcommands(build_parser())) == tuple(n for names in cli_main.GROUPS.values() for n in names)


@pytest.mark.parametrize(("words", "group"), [
    (["host-restore", "--dry-run"], "host"), (["-v", "run", "study.toml"], "run"), (["compare", "a", "b"], "report"),
    (["vm", "up"], "guest"), ([], None), (["--version"], None), (["bogus"], None), (["--help", "run"], None),
    (["run", "--help"], "run"),
])
def test_the_words_choose_the_group_whose_module_is_imported(words: list[str], group: str | None) -> None:
    assert cli_main._group_of(words) == group


def test_the_undo_path_imports_no_numerics_and_no_other_command() -> None:
    # host-restore in the rig's L1 under TCG took 14 s, most of it importing what it never used
    heavy = ("numpy", "scipy", "matplotlib", "vmharness.cli.run", "vmharness.cli.report", "vmharness.cli.bench")
    probe = ("import sys\nfrom vmharness.cli import main\nmain.build_parser('host')\nimport vmharness.experiment.ops\n"
             f"print([m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
