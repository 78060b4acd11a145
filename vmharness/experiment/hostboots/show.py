"""The host boots of a configuration in words, for `run --print-xml` and `host-prepare --dry-run
--config`: what each would boot (its kernel's release and sha256, its initrd), the kexec command that
would load it, the order of the rounds, how the run would come home, whether kexec can work here, and
what a reboot would end. Read from this machine (the files) and the host root (the rest), changing
nothing."""

from __future__ import annotations

import shlex

from vmharness import textsafe
from vmharness.errors import HarnessError
from vmharness.experiment.hostboots import checks, plan, target
from vmharness.model.sections import RunConfig
from vmharness.system.root import HostRoot

HOW = f"run makes them with {checks.FLAG}, rebooting the host between them"


def _target(t: target.Target, program: str) -> str:
    initrd = f", initrd {t.initrd.path} (sha256 {t.initrd.sha256[:16]}...)" if t.initrd else ""
    return (f"kernel {t.release} (sha256 {t.kernel.sha256[:16]}...){initrd}; would load: "
            f"{textsafe.line(shlex.join(t.kexec_argv(program)))}")


def lines(root: HostRoot, cfg: RunConfig) -> list[str]:
    """The host boots of `cfg` as lines ([] when it has none), a [[host_boot]] no instance names among
    them (the run does not boot it: a `host_boot` forgotten in an instance); a host boot whose files do
    not pass is refused (one HarnessError), as the run would refuse it."""
    by_boot: dict[str, list[str]] = {}
    for i in cfg.instance:
        by_boot.setdefault(i.host_boot, []).append(i.name)
    unused = [f"  host boot {b.name}: no instance runs under it, so the run does not boot it"
              for b in cfg.host_boot if b.name not in by_boot]
    if not plan.needs_host_boots(cfg):
        return [f"host boots: none the run would make ({HOW})", *unused] if unused else []
    named = target.named(root, cfg)
    try:
        program = checks.check_kexec(root)
        can = f"kexec: {program}"
    except HarnessError as exc:
        program, can = "kexec", f"kexec cannot work here: {exc.message}"
    out = [f"host boots ({HOW}):"]
    for name, t in named.items():
        out.append(f"  host boot {name} (instances {', '.join(by_boot[name])}): {_target(t, program)}")
    out += unused
    try:
        out.append(f"  the boot the run starts in, and comes home to: {_target(target.home(root), program)}")
    except HarnessError as exc:
        out.append(f"  the boot the run starts in: a run could not come back to it, so it would be refused: "
                   f"{exc.message}")
    order = "; ".join(f"{s.label} ({', '.join(s.instances)})" for s in plan.stops(cfg))
    out += [f"  order: {order}; {plan.switches(cfg)} switches in all", f"  {can}"]
    ends = checks.reboot_ends(root, checks.running_guests(root))
    out.append("  each switch reboots the host, which ends " + ("; ".join(ends) if ends else "every process on it"))
    return out

