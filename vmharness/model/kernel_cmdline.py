"""A guest kernel's command line read as the kernel reads it, for the switches of a study
(model/switches.py) and the check on its reference (model/derived.py).

The kernel has two readers. Its parameters (`early_param`, `__setup`, module parameters: `mitigations=`
among them) go through lib/cmdline.c's `next_arg`: words are split at blanks outside double quotes, a
quote toggles "inside" wherever it stands, a word that begins with a quote loses its closing one, and a
value that begins with a quote loses both; '-' and '_' in a parameter's name are the same
(`parameqn`); a bare `--` ends the kernel's parameters (the rest are init's). So
`foo="bar mitigations=off"` is the parameter foo, and `"mitigations=off"` is mitigations=off.
x86's early code also scans the raw line word by word for some switches (arch/x86/lib/cmdline.c,
`cmdline_find_option`: `nopti`, `pti=`, `spectre_v2=` in many versions): blanks only, no quotes, exact
names, and it does not stop at `--`. Where the two readers disagree about a switch the line is
ambiguous, and `ambiguous` names the word."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    text: str  # as written, quotes included (what a rewritten line keeps)
    key: str  # the name as the kernel compares it: '-' read as '_'
    value: str | None  # after the first '=', quotes stripped as next_arg strips them; None: no '='


@dataclass(frozen=True)
class Cmdline:
    params: tuple[Param, ...]  # the kernel's parameters, in order
    rest: str  # from a bare `--` on (init's arguments), "" when none


def _next(line: str, start: int) -> tuple[Param, int]:
    """lib/cmdline.c's next_arg from `start` (not a blank): the parameter and where the next begins."""
    i, equals, in_quote = start, -1, False
    quoted = line[i] == '"'
    if quoted:
        i, in_quote = i + 1, True
    body = i
    while i < len(line) and (in_quote or not line[i].isspace()):
        if equals < 0 and line[i] == "=" and i > body:
            equals = i
        if line[i] == '"':
            in_quote = not in_quote
        i += 1
    end = i - 1 if quoted and i > body and line[i - 1] == '"' else i
    name = line[body:equals] if equals >= 0 else line[body:end]
    value = None
    if equals >= 0:
        value = line[equals + 1:end]
        if value.startswith('"'):
            value = value[1:]
            if line[i - 1] == '"' and not quoted:
                value = value[:-1]
    return Param(line[start:i], name.replace("-", "_"), value), i


def parse(line: str) -> Cmdline:
    """`line` read as next_arg reads it (see the module's text)."""
    out: list[Param] = []
    i = 0
    while True:
        while i < len(line) and line[i].isspace():
            i += 1
        if i == len(line):
            return Cmdline(tuple(out), "")
        param, after = _next(line, i)
        if param.text == "--":
            return Cmdline(tuple(out), line[i:].strip())
        out.append(param)
        i = after


def _scanned(line: str, keys: set[str]) -> list[tuple[str, str | None]]:
    """x86's early scanner: each blank-separated word whose exact name is one of `keys`."""
    out = []
    for word in line.split():
        name, eq, value = word.partition("=")
        if name in keys:
            out.append((name, value if eq else None))
    return out


def ambiguous(line: str, keys: set[str]) -> str | None:
    """The first word of `line` that names one of `keys` (each with '_') that the kernel's two readers
    read differently, or None when they agree on every such word."""
    generic = [(p.key, p.value) for p in parse(line).params if p.key in keys]
    if generic == _scanned(line, keys):
        return None
    spelled = {k.replace("_", "-") for k in keys} | keys
    return next((w for w in line.split() if any(k in w for k in spelled) or w == "--"), line.split()[0])
