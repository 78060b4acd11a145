"""The CPU features a QEMU binary knows, asked of the binary itself, not kept in a list here: names
change between QEMU versions (7.2 has no rfds-no, gds-no, bhi-no or srso-no; later versions add them),
so a researcher's `cpu_features` can only be checked against the QEMU that will run the guest.

Two questions, both answered by QEMU in well under a second (measured with 7.2: 0.1 s each):
- `recognized`: every feature name the binary accepts, from `-cpu help` ("Recognized CPUID flags:");
- `expansion`: which of them a CPU model has under an accelerator (QMP query-cpu-model-expansion, with
  `-machine none`, no guest started): under TCG, `max` has none of the speculation-control bits, while
  under KVM `max` and `host` show what the host's KVM passes on (arch-capabilities, mds-no, ...).

Names are QEMU's; libvirt's cpu_map spells some differently (lahf_lm, pclmuldq): QEMU accepts those
as aliases, but they are not in `recognized`.
"""

from __future__ import annotations

import json
import re
import shutil

from vmharness.errors import HarnessError
from vmharness.system import proc

QEMU = "qemu-system-x86_64"
HEADING = "Recognized CPUID flags:"
TIMEOUT = 10.0  # seconds; both answers take about 0.1 s
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")


def parse_help(text: str) -> frozenset[str]:
    """The names under HEADING in `-cpu help`'s output: indented lines, up to the first line that is not."""
    start = text.find(HEADING)
    if start < 0:
        raise HarnessError(f"QEMU's -cpu help has no {HEADING!r} section",
                           "is this qemu-system-x86_64? Its CPU features cannot be checked")
    names: set[str] = set()
    for line in text[start + len(HEADING):].splitlines()[1:]:
        if not line.strip():
            continue
        if not line[0].isspace():
            break
        for name in line.split():
            if not _NAME.match(name):
                raise HarnessError(f"QEMU's -cpu help lists a feature named {name!r}", "report this QEMU's version")
            names.add(name)
    if not names:
        raise HarnessError(f"QEMU's -cpu help lists no feature under {HEADING!r}", "report this QEMU's version")
    return frozenset(names)


def recognized(qemu: str = QEMU) -> frozenset[str]:
    """Every CPU feature name `qemu` accepts in -cpu."""
    return parse_help(_run([_binary(qemu), "-cpu", "help"]))


def parse_expansion(stdout: str) -> dict[str, bool]:
    """The boolean properties of the model in QMP's reply to query-cpu-model-expansion (one JSON object a
    line: the greeting, the replies, events)."""
    for line in stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "error" in msg:
            raise HarnessError(f"QEMU refused query-cpu-model-expansion: {msg['error'].get('desc', msg['error'])}",
                               "check the CPU model's name against qemu-system-x86_64 -cpu help")
        model = msg.get("return", {}).get("model") if isinstance(msg.get("return"), dict) else None
        if isinstance(model, dict) and isinstance(model.get("props"), dict):
            return {k: v for k, v in model["props"].items() if isinstance(v, bool)}
    raise HarnessError("QEMU's QMP answer holds no CPU model expansion", "run the QEMU command by hand to see why")


def expansion(accel: str, model: str = "max", qemu: str = QEMU) -> dict[str, bool]:
    """Which recognized features `model` has under `accel` (kvm or tcg), as QEMU would build it."""
    if accel not in ("kvm", "tcg") or not _NAME.match(model):
        raise HarnessError(f"cannot expand CPU model {model!r} under {accel!r}", "use kvm or tcg and a model name")
    binary = _binary(qemu)
    commands = [{"execute": "qmp_capabilities"},
                {"execute": "query-cpu-model-expansion", "arguments": {"type": "full", "model": {"name": model}}},
                {"execute": "quit"}]
    out = _run([binary, "-machine", "none", "-accel", accel, "-nodefaults", "-display", "none", "-qmp", "stdio"],
               "".join(json.dumps(c) + "\n" for c in commands))
    names = recognized(binary)
    return {k: v for k, v in parse_expansion(out).items() if k in names}


def _binary(qemu: str) -> str:
    found = shutil.which(qemu)
    if found is None:
        raise HarnessError(f"{qemu} is not installed: its CPU features cannot be asked",
                           "apt-get install qemu-system-x86")
    return found


def _run(argv: list[str], stdin: str | None = None) -> str:
    res = proc.run(argv, timeout=TIMEOUT, check=False, input=stdin)
    if not res.ok:
        raise res.failure()
    return res.stdout
