"""Tuning plans on synthetic topologies (the seeds' own cases), masks, profiles, and apply/revert on a
writable synthetic root, including a write the kernel rejects."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakehost import FakeHost
from vmharness.cpus import format_mask, parse_mask
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.model import profile
from vmharness.system.root import HostRoot
from vmharness.tune import apply, facts, knobs
from vmharness.tune.access import HostTarget
from vmharness.tune.plan import Plan

NIC = "0000:b3:00.0"


def nic_host(tmp_path: Path, nodes: int, per_node: int, nic_node: int, queues: int,
             labels: tuple[str, ...] = ()) -> FakeHost:
    """A host whose eth0 (an mlx5-like NIC on `nic_node`) has `queues` RX queues, one MSI-X vector
    each, plus an async vector that is not a queue's (or the vectors `labels` name, from IRQ 99)."""
    h = FakeHost(tmp_path / "root", nodes=nodes, cpus_per_node=per_node)
    total = nodes * per_node
    h.write("sys/devices/system/cpu/possible", f"0-{total - 1}\n")
    d = h.pci(NIC, driver="mlx5_core", group=40, numa=nic_node, netdevs=("eth0",))
    nd = f"{d}/net/eth0"
    h.link(f"{nd}/device", d)
    h.write(f"{nd}/ifindex", "2\n")
    h.write(f"{d}/uevent", "DRIVER=mlx5_core\n")
    everyone = format_mask(set(range(total)), total)
    lines = ["  " + " ".join(f"CPU{c}" for c in range(total))]
    vectors = {99: "mlx5_async0@pci:0000:b3:00.0"} | {100 + q: f"mlx5_comp{q}@pci:0000:b3:00.0" for q in range(queues)}
    if labels:
        vectors = {99 + i: label for i, label in enumerate(labels)}
    for irq, label in vectors.items():
        h.write(f"{d}/msi_irqs/{irq}", "msix\n")
        h.write(f"proc/irq/{irq}/smp_affinity", everyone + "\n")
        lines.append(f" {irq}: " + " ".join("0" for _ in range(total)) + f"  IR-PCI-MSIX-{NIC} {irq}-edge  {label}")
    h.write("proc/interrupts", "\n".join(lines) + "\n")
    for q in range(queues):
        h.write(f"{nd}/queues/rx-{q}/rps_cpus", format_mask(set(), total) + "\n")
        h.write(f"{nd}/queues/rx-{q}/rps_flow_cnt", "0\n")
        h.write(f"{nd}/queues/tx-{q}/xps_cpus", "0\n")
    for path, value in {"net/core/somaxconn": "4096", "net/ipv4/tcp_max_syn_backlog": "1024",
                        "net/core/netdev_max_backlog": "1000", "net/ipv4/ip_local_port_range": "32768\t60999",
                        "net/ipv4/tcp_tw_reuse": "2", "fs/file-max": "9223372036854775807",
                        "net/core/rps_sock_flow_entries": "0"}.items():
        h.write(f"proc/sys/{path}", value + "\n")
    clock = "sys/devices/system/clocksource/clocksource0"
    h.write(f"{clock}/available_clocksource", "tsc hpet acpi_pm\n")
    h.write(f"{clock}/current_clocksource", "hpet\n")
    return h


def _plan(h: FakeHost, prof: str = "seeds", writable: bool = False) -> Plan:
    t = HostTarget(HostRoot(h.base, allow_writes=writable))
    return knobs.make(t, profile.load(prof), ("eth0",), is_host=True)


def _after(plan: Plan, path: str) -> str:
    return next(c.after for c in plan.changes if c.path.endswith(path))


def test_masks_in_32_bit_groups() -> None:
    assert format_mask(set(range(17, 32)), 32) == "fffe0000"
    assert format_mask({0}, 2) == "00000001"
    assert format_mask(set(range(128)), 128) == "ffffffff,ffffffff,ffffffff,ffffffff"
    assert parse_mask("ffffffff,00000000,00000000,00000001") == frozenset({0, 96, *range(97, 128)})
    with pytest.raises(HarnessError, match="CPU 32 does not exist here"):
        format_mask({32}, 32)
    with pytest.raises(HarnessError, match="is not a CPU mask"):
        parse_mask("0xzz")


def test_seed_000_two_nodes_of_16_irq_on_cpu_16(tmp_path: Path) -> None:
    """The NIC on node 1: its one queue interrupt on CPU 16, RPS on the rest of node 1: fffe0000."""
    plan = _plan(nic_host(tmp_path, nodes=2, per_node=16, nic_node=1, queues=1))
    assert _after(plan, "/proc/irq/100/smp_affinity") == "00010000"
    assert _after(plan, "rx-0/rps_cpus") == "fffe0000"
    assert not any("/proc/irq/99/" in c.path for c in plan.changes)  # the async vector stays put
    assert _after(plan, "rx-0/rps_flow_cnt") == "32768"
    assert _after(plan, "rps_sock_flow_entries") == "32768"


@pytest.mark.parametrize(("label", "queue"), [
    ("eth0-rx-0", 0), ("eth0-tx-1", 1), ("eth0-TxRx-3", 3), ("eth0", None),  # e1000e, igb, igbvf, ixgbe
    ("eth7-rx-0", 0), ("eth7", None),  # named before the interface was renamed eth0
    ("virtio2-input.1", 1), ("virtio2-output.1", 1), ("virtio2-config", None), ("virtio2-virtqueues", 0),
    ("mlx5_comp7@pci:0000:b3:00.0", 7), ("mlx5_async0@pci:0000:b3:00.0", None), ("mlx5_async_eq", None),
    ("mlx5_cmd_eq", None), ("mlx5_pages_eq", None), ("mlx4-2@0000:b3:00.0", 2), ("mlx4-async@pci:0000:b3:00.0", None),
    ("i40e-eth0-TxRx-5", 5), ("i40e-0000:b3:00.0:misc", None), ("iavf-0000:b3:02.0:mbx", None),
    ("ice-eth0-TxRx-0", 0), ("eth0-Tx-Rx-2", 2), ("ena-mgmnt@pci:0000:00:05.0", None),
    ("eth0-rxtx-1", 1), ("eth0-event-2", None), ("gve-ntfy-blk3@pci:0000:00:04.0", 3),
])
def test_queue_vectors_are_told_from_misc_ones_by_their_names(label: str, queue: int | None) -> None:
    assert facts.vector_queue(label, "eth0") == queue


def test_e1000e_rx_and_tx_vectors_of_a_queue_share_its_cpu_and_the_other_vector_stays(tmp_path: Path) -> None:
    plan = _plan(nic_host(tmp_path, nodes=1, per_node=4, nic_node=0, queues=1,
                          labels=("eth0-rx-0", "eth0-tx-0", "eth0")))
    assert _after(plan, "/proc/irq/99/smp_affinity") == _after(plan, "/proc/irq/100/smp_affinity") == "00000001"
    assert not any("/proc/irq/101/" in c.path for c in plan.changes + plan.kept)
    assert any(s.knob == "irq_affinity" and s.why == "eth0: left where they are, serving no queue: eth0 (IRQ 101)"
               for s in plan.skips)
    assert _after(plan, "rx-0/rps_cpus") == "0000000e"


def test_virtio_queues_each_on_a_cpu_of_their_own_and_rps_follows_its_queue(tmp_path: Path) -> None:
    labels = ("virtio1-config", "virtio1-input.0", "virtio1-output.0", "virtio1-input.1", "virtio1-output.1")
    plan = _plan(nic_host(tmp_path, nodes=1, per_node=4, nic_node=0, queues=2, labels=labels))
    irq_cpu = {c.path.split("/")[3]: c.after for c in plan.changes if c.knob == "irq_affinity"}
    assert irq_cpu == {"100": "00000001", "101": "00000001", "102": "00000002", "103": "00000002"}
    assert _after(plan, "rx-1/rps_cpus") == "0000000d"  # the node without queue 1's CPU (1)
    assert any(s.why.endswith("serving no queue: virtio1-config (IRQ 99)") for s in plan.skips)


def test_128_cpus_16_queues_masks_in_groups(tmp_path: Path) -> None:
    plan = _plan(nic_host(tmp_path, nodes=2, per_node=64, nic_node=0, queues=16))
    assert _after(plan, "rx-3/rps_cpus") == "00000000,00000000,ffffffff,fffffff7"
    assert _after(plan, "/proc/irq/103/smp_affinity") == "00000000,00000000,00000000,00000008"
    assert [c.after for c in plan.changes if c.path.endswith("rps_flow_cnt")] == ["2048"] * 16
    assert sum(1 for c in plan.changes if c.knob == "rps") == 16


def test_single_cpu_guest_skips_rps(tmp_path: Path) -> None:
    plan = _plan(nic_host(tmp_path, nodes=1, per_node=1, nic_node=-1, queues=1))
    assert any(c.path == "/proc/irq/100/smp_affinity" and c.after == "00000001" for c in plan.kept)
    assert not any(c.knob == "rps" for c in plan.changes)
    assert any(s.knob == "rps" and "no CPU besides the interrupt's" in s.why for s in plan.skips)


def test_sysctls_floors_and_exact_values(tmp_path: Path) -> None:
    plan = _plan(nic_host(tmp_path, nodes=1, per_node=2, nic_node=0, queues=1))
    assert _after(plan, "net/core/somaxconn") == "65535"
    assert _after(plan, "ip_local_port_range") == "1024 65000"
    assert any(c.path.endswith("fs/file-max") for c in plan.kept)  # never lowered
    assert _after(plan, "current_clocksource") == "tsc"
    assert {s.knob for s in plan.skips} >= {"governor", "irqbalance", "coalescing"}  # no cpufreq, no programs


def test_none_profile_changes_nothing(tmp_path: Path) -> None:
    plan = _plan(nic_host(tmp_path, nodes=1, per_node=2, nic_node=0, queues=1), "none")
    assert plan.changes == [] and plan.kept == []


def test_profile_files(tmp_path: Path) -> None:
    good = tmp_path / "mine.toml"
    good.write_text('base = "seeds"\nrps = "all"\nrfs = 0\n[sysctl]\n"net.core.somaxconn" = 4096\n')
    p = profile.load(str(good))
    assert (p.name, p.rps, p.rfs, p.sysctl["net.core.somaxconn"]) == ("mine", "all", None, 4096)
    assert p.sysctl["net.ipv4.tcp_tw_reuse"] == 1  # the base's others stay
    for text, message in {'rpss = "all"\n': "bad.toml: rpss",
                          'rps = "most"\n': "rps must be node-except-irq, node, all, off or keep, not 'most'",
                          "rfs = -1\n": "rfs must be between 0 and",
                          '[sysctl]\n"net.core.some conn" = 1\n': "is not a sysctl name",
                          'base = "fast"\n': "base must be none or seeds"}.items():
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(HarnessError) as err:
            profile.load(str(bad))
        assert message in err.value.message
    with pytest.raises(HarnessError, match="no profile 'fastest'"):
        profile.load("fastest")


def test_apply_then_revert_restores_every_value(tmp_path: Path) -> None:
    h = nic_host(tmp_path, nodes=2, per_node=16, nic_node=1, queues=2)
    root = HostRoot(h.base, allow_writes=True)
    plan = _plan(h, writable=True)
    before = {c.path: " ".join(root.read_text(c.path).split()) for c in plan.changes}
    made = apply.apply(root, HostTarget(root), plan, lambda _l: None, "tune")
    assert root.read_text("/sys/class/net/eth0/queues/rx-1/rps_cpus") == "fffd0000"
    assert len(made) == len(plan.changes) == len(apply.pending(root))
    assert apply.undo(root, apply.pending(root), lambda _l: None) == []
    assert {p: " ".join(root.read_text(p).split()) for p in before} == before
    assert not root.exists(journal.JOURNAL)


def test_a_rejected_write_reverts_what_was_applied(tmp_path: Path) -> None:
    h = nic_host(tmp_path, nodes=2, per_node=16, nic_node=1, queues=1)
    root = HostRoot(h.base, allow_writes=True)
    plan = _plan(h, writable=True)
    before = {c.path: " ".join(root.read_text(c.path).split()) for c in plan.changes}
    victim = "/proc/sys/net/ipv4/tcp_tw_reuse"  # a directory in its place: the write fails like EINVAL
    root.path(victim).unlink()
    root.path(victim).mkdir()
    with pytest.raises(HarnessError, match="tcp_tw_reuse: Is a directory"):
        apply.apply(root, HostTarget(root), plan, lambda _l: None, "tune")
    assert {p: " ".join(root.read_text(p).split()) for p in before if p != victim} == {
        p: v for p, v in before.items() if p != victim}
    assert apply.pending(root) == []
