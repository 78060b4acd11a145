"""An attribution study's host switches and attack-vector switches (study.host_switches, model/
hoststudy.py, model/vectors.py), given values that must be refused, through the real command
(tests/hostile_kit.py): `run --print-xml` reads the configuration, expands the study and checks each
host boot's kernel on this machine before it prints anything, and boots nothing. Each case: exit 2, one
`error:` line naming the key, one `hint:` line, no traceback, nothing changed. A kernel that must get
past the checks of the place is made in a folder only root can write (tests/qemu_kit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import hostboot_kit, hostile_kit
from tests.hostile_kit import Case, Outcomes, run_toml

RUN = ("run", "r.toml", "--print-xml")
HOST = "config.study.host_switches[0]"


def _study(study: str, reference: str = "", boot: str = "", first: str = "pti=on") -> str:
    """A study (a TOML body for [study]) from the instance `on` (its cmdline `first`, under `reference`)."""
    under = f'host_boot = "{reference}"\n' if reference else ""
    return (f'[guest]\naccel = "tcg"\n{boot}[study]\n{study}\n'
            f'[[instance]]\nname = "on"\ncmdline = "{first}"\n{under}')


def _old_kernel(cwd: Path) -> None:
    """The reference host boot is a 6.12 kernel: it has no attack-vector controls."""
    folder = hostboot_kit.trusted(f"hostile-switch-{cwd.name}")
    kernel = hostboot_kit.kernel(folder, "6.12.0-1-amd64")
    boot = f'[[host_boot]]\nname = "ref"\nkernel = "{kernel.path}"\n'
    run_toml(_study('host_switches = ["guest_host"]', "ref", boot))(cwd)


def cases() -> list[Case]:
    ref = '[[host_boot]]\nname = "ref"\nkernel = "/boot/vmlinuz-6.1"\ncmdline = "quiet spectre_v2=off"\n'
    return [
        Case("host-switch-newline", RUN, (HOST, "control character"),
             run_toml(_study('host_switches = ["spectre_v2\\nx"]'))),
        Case("host-switch-init", RUN, (HOST, "'init=/bin/sh' is not a host mitigation switch"),
             run_toml(_study('host_switches = ["init=/bin/sh"]'))),
        Case("guest-switch-init", RUN, ("config.study.switches[0]", "is not a mitigation switch"),
             run_toml(_study('switches = ["init=/bin/sh"]'))),
        Case("host-switch-unknown", RUN, (HOST, "'nosuch' is not a host mitigation switch"),
             run_toml(_study('host_switches = ["nosuch"]'))),
        Case("host-switch-all", RUN, (HOST, "'all' is not a host mitigation switch"),
             run_toml(_study('host_switches = ["all"]'))),
        Case("host-switch-guest-vector", RUN, (HOST, "'user_kernel' is not a host mitigation switch"),
             run_toml(_study('host_switches = ["user_kernel"]'))),
        Case("guest-switch-host-vector", RUN, ("config.study.switches[0]", "'guest_guest' is not a mitigation"),
             run_toml(_study('switches = ["guest_guest"]'))),
        # a label is how the answer names a switch on both sides, never a name the study takes
        Case("host-switch-label", RUN, (HOST, "'host:spectre_v2' is not a host mitigation switch"),
             run_toml(_study('switches = ["spectre_v2"]\nhost_switches = ["host:spectre_v2"]'))),
        Case("guest-switch-label", RUN, ("config.study.switches[0]", "'guest:spectre_v2' is not a mitigation"),
             run_toml(_study('switches = ["guest:spectre_v2"]\nhost_switches = ["spectre_v2"]'))),
        Case("host-switch-twice", RUN, ("study.host_switches names the switch 'mds' twice",),
             run_toml(_study('host_switches = ["mds", "mds"]'))),
        Case("host-switch-not-a-list", RUN, ("config.study.host_switches must be an array of strings",),
             run_toml(_study('host_switches = "mds"'))),
        # on both sides, the host's instance takes a name of its own; one already taken is refused
        Case("host-switch-both-sides-name-taken", RUN, ("study.host_switches: an instance is already named "
                                                        "'host-no-spectre_v2'",),
             run_toml(_study('switches = ["spectre_v2"]\nhost_switches = ["spectre_v2"]') +
                      '[[instance]]\nname = "host-no-spectre_v2"\n')),
        Case("host-switch-reference-off", RUN, ("study.host_switches: the reference host boot ref already turns "
                                                "spectre_v2 off",),
             run_toml(_study('host_switches = ["spectre_v2"]', "ref", ref))),
        Case("host-switch-reference-unknown", RUN, ("study.host_switches: the reference on's host_boot 'nope' names "
                                                    "no [[host_boot]]",),
             run_toml(_study('host_switches = ["mds"]', "nope"))),
        Case("guest-vector-reference-mitigations", RUN, ("study.switches: the reference on sets mitigations=",),
             run_toml(_study('switches = ["user_kernel"]', first="mitigations=auto,nosmt"))),
        Case("host-vector-old-kernel", RUN, ("config.host_boot[1] (host-no-guest_host): the attack-vector controls "
                                             "(guest_host) need Linux 6.17 or later", "'6.12.0-1-amd64'"),
             _old_kernel),
    ]


CASES = cases()
outcomes = hostile_kit.fixture(CASES)


def test_no_case_changed_state_outside_its_folder(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_study_switch_that_is_not_fit_is_refused_in_one_line(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])
