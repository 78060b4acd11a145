"""Damaged host trees, one case per class of damage that once ended in a traceback (or an error without
its hint), found by tests/unit/test_damaged_trees.py: symlink loops (a link to itself, a->b->a, a folder
linked to its parent) where a command lists a folder or reads a file, a NUL byte in a file a path is
built from, journal records and probes of another shape, a node folder that became a file.

Each case runs the real command on the rich synthetic host (tests/treedamage.py) with its damage, in a
working folder of its own, through tests/hostile_kit.py: the exit code, one `error:` line naming the file
and the fault then one `hint:` line, no traceback, no hang, and nothing written into the tree.
Each command has its own /tmp and /run/vmharness (tests/own_mounts.py), where it must leave nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import hostile_kit, treedamage
from tests.hostile_kit import Build, Case, Outcomes, S
from tests.treedamage import Damage

LOOP = "a symlink loop"
GROUPS, NODES = "/sys/kernel/iommu_groups", "/sys/devices/system/node"
NIC = treedamage.NIC
JOURNAL = "/run/vmharness/journal.jsonl"
QUEUES = f"/{treedamage.NIC_DIR}/net/ens1f0/queues"


def damaged(*damages: Damage) -> Build:
    """The rich synthetic host in snap/, with these damages."""
    def build(cwd: Path) -> None:
        treedamage.rich_host(cwd / "snap")
        for d in damages:
            assert treedamage.apply(cwd / "snap", d), d
    return build


def journal(line: str) -> Build:
    return damaged(Damage("text", JOURNAL, line + "\n"))


def probes(text: str) -> Build:
    return damaged(Damage("text", "/vmharness-probes.json", text))


CASES = [
    # a symlink loop in a host root, through several commands (each was a traceback: ELOOP from listdir)
    Case("loop-groups-check", ("host-check", *S), (GROUPS, LOOP), damaged(Damage("loop", GROUPS))),
    Case("loop-groups-groups", ("host-groups", *S, "--json"), (GROUPS, LOOP), damaged(Damage("self-loop", GROUPS))),
    Case("loop-groups-prepare", ("host-prepare", *S, "--dry-run", "--bdf", NIC), (GROUPS, LOOP),
         damaged(Damage("loop", GROUPS))),
    Case("loop-net-snapshot", ("host-snapshot", *S, "out.tar.gz"), ("/sys/class/net", LOOP),
         damaged(Damage("self-loop", "/sys/class/net"))),
    Case("loop-net-tune", ("tune", "plan", *S), ("/sys/class/net", LOOP), damaged(Damage("loop", "/sys/class/net"))),
    Case("loop-nodes-hugepages", ("host-prepare", *S, "--dry-run", "--hugepages", "64M"), (NODES, LOOP),
         damaged(Damage("loop", NODES))),
    Case("loop-nodes-run", ("run", "--print-xml", *S), (NODES, LOOP), damaged(Damage("self-loop", NODES))),
    Case("loop-nodes-setup", ("host-setup", "--print", "--hugepages", "64M", *S), (NODES, LOOP),
         damaged(Damage("loop", NODES))),
    # a loop where a file was read: one line, now with its hint
    Case("loop-if-inet6-groups", ("host-groups", *S), ("/proc/net/if_inet6", LOOP),
         damaged(Damage("loop", "/proc/net/if_inet6"))),
    Case("loop-modules-check", ("host-check", *S), ("modules.builtin", LOOP), damaged(Damage("self-loop", "/lib"))),
    # a folder linked to its parent: the NIC's interface cannot be checked, so the guard refuses it
    Case("parent-loop-netdev-prepare", ("host-prepare", *S, "--dry-run", "--bdf", NIC),
         ("ens1f0", "cannot be checked"), damaged(Damage("parent-loop", "/sys/class/net/ens1f0"))),
    # a NIC's queue folder that is a loop, or a stray entry among its queues (ValueError: int('0~loop'))
    Case("loop-queue-tune", ("tune", "plan", *S), ("queues/rx-0/rps_cpus", LOOP),
         damaged(Damage("loop", f"{QUEUES}/rx-0"))),
    Case("stray-queue-tune", ("tune", "plan", *S), ("tuning plan for host",),
         damaged(Damage("dir-for-file", f"{QUEUES}/rx-0~old")), code=0),
    # a NUL byte in the kernel release, which names the modules' folder (ValueError: embedded null byte)
    Case("nul-osrelease-check", ("host-check", *S), ("osrelease", "not a kernel release"),
         damaged(Damage("garbage", "/proc/sys/kernel/osrelease", b"6.1\x00x\n"))),
    Case("nul-osrelease-prepare", ("host-prepare", *S, "--dry-run", "--bdf", NIC), ("osrelease",),
         damaged(Damage("garbage", "/proc/sys/kernel/osrelease", b"\xff\xfe\x00\n"))),
    # journal records without their fields or of another shape (KeyError, TypeError)
    Case("journal-bind-bare", ("host-restore", *S, "--dry-run"), ("journal.jsonl", "line 1", "'bind' record without"),
         journal('{"seq": 1, "op": "bind"}')),
    Case("journal-released-seqs", ("run", "--print-xml", *S), ("journal.jsonl", "line 1", "seqs"),
         journal('{"seq": 1, "op": "released", "seqs": 4}')),
    Case("journal-pages-node", ("run", "--print-xml", *S), ("journal.jsonl", "line 1", "node"),
         journal('{"seq": 1, "op": "pages", "node": [1], "size_kib": 2048, "before": 0, "owner": "host-prepare"}')),
    Case("journal-tune-target", ("host-restore", *S, "--dry-run"), ("journal.jsonl", "record 1 (tune) is damaged"),
         journal('{"seq": 1, "op": "tune", "target": 1, "knob": "k", "path": "/p", "before": "1", "after": "2", '
                 '"owner": "tune"}')),
    # probes of another shape (AttributeError, KeyError, RecursionError)
    Case("probes-a-list", ("host-check", *S), ("vmharness-probes.json", "not a JSON object"), probes("[1]")),
    Case("probes-kvm-bare", ("vm", "up", "--print-xml", *S), ("vmharness-probes.json", "kvm"),
         probes('{"kvm": {"usable": true}}')),
    Case("probes-nested", ("host-groups", *S), ("vmharness-probes.json", "not JSON"), probes("[" * 5000 + "]" * 5000)),
    # a NUMA node's folder became a file: the NIC's node has no CPUs (ZeroDivisionError); planned on all CPUs
    Case("node-a-file-tune", ("tune", "plan", *S), ("tuning plan for host",),
         damaged(Damage("empty", f"{NODES}/node1")), code=0),
]

outcomes = hostile_kit.fixture(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_damaged_host_tree_is_one_line_or_an_answer(case: Case, outcomes: Outcomes) -> None:
    hostile_kit.check(case, outcomes.by_case[case.id])


def test_damaged_trees_changed_nothing_outside(outcomes: Outcomes) -> None:
    hostile_kit.check_global(outcomes)
