"""Which host boot a run is in when, and what it measures there: pure, from the configuration alone.

A run whose instances name host boots goes round them: each round is one host boot of each in use, in
an order rotated every round (as guest boots rotate, bench/plan.py `order`), so that no host boot is
always first after a cold start or always last before the machine warms; in each it measures every
instance that names that host boot, one guest boot each, in that round's instance order. Round r is
iteration r of every instance. START ("") is the boot the run started in: the first round begins with
it when an instance runs there, so the run's first host boot needs no switch; after the last round the
host goes back to it (`home`), whatever the last round ended in."""

from __future__ import annotations

from dataclasses import dataclass

from vmharness.bench.plan import order
from vmharness.model.sections import RunConfig

START = ""  # the boot the run started in: no [[host_boot]] entry


@dataclass(frozen=True)
class Stop:
    """One host boot of a round: the host boot's name (START for the run's own) and the instances
    measured there, in order."""

    round: int
    boot: str
    instances: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"round {self.round + 1}: {self.boot or 'the boot the run started in'}"


def in_use(cfg: RunConfig) -> list[str]:
    """The host boots the instances name, START first when any instance runs there, then in the order
    of the [[host_boot]] tables (a table no instance names is not booted)."""
    named = {i.host_boot for i in cfg.instance}
    return ([START] if START in named else []) + [b.name for b in cfg.host_boot if b.name in named]


def stops(cfg: RunConfig) -> list[Stop]:
    """Every host boot of the run in order: sweep.iterations rounds, each with each host boot in use once."""
    boots = in_use(cfg)
    by_boot = {i.name: i.host_boot for i in cfg.instance}
    out = []
    for r in range(cfg.sweep.iterations):
        k = r % len(boots)
        names = order(cfg, r)
        out += [Stop(r, b, tuple(n for n in names if by_boot[n] == b)) for b in boots[k:] + boots[:k]]
    return out


def switches(cfg: RunConfig) -> int:
    """How many kexecs the run makes: one per host boot but a first one in START, and one home at the
    end when the last is not START."""
    planned = stops(cfg)
    first = 0 if planned[0].boot == START else 1
    home = 0 if planned[-1].boot == START else 1
    return len(planned) - 1 + first + home


def needs_host_boots(cfg: RunConfig) -> bool:
    """Whether any instance runs under a host boot other than the one the run started in."""
    return any(i.host_boot != START for i in cfg.instance)
