"""What a `[[host_boot]]`'s command line may hold (model/hostboots.py): the kernel's parameters, any of
them, and nothing the kernel hands to the host's init or that tells the init or the initramfs what to
start. The hostile table (test_hostile_host_boots.py) runs some of these through `run --print-xml`;
here, every word, with the lines real hosts boot with as the control."""

from __future__ import annotations

import pytest

from vmharness.errors import HarnessError
from vmharness.model.hostboots import check_cmdline

# Real command lines (Debian's, a dracut host's with LVM and LUKS, a study's host switches) and the
# parameters a researcher adds: none may be refused.
ACCEPTED = [
    "root=UUID=0b7f6e0c-7e1b-4d2c-9a55-2c8d2b4b1a11 ro quiet",
    "root=/dev/mapper/rhel-root ro crashkernel=auto rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet",
    "rd.luks.uuid=luks-1234 rd.md=0 rd.dm=0 console=ttyS0,115200n8 net.ifnames=0",
    "spectre_v2=off retbleed=off spec_rstack_overflow=off vmscape=off mitigations=auto,no_guest_host",
    "nosmt nopti kvm.nx_huge_pages=off kvm-intel.ept=1 init_on_alloc=0 intel_iommu=on iommu=pt",
    "hugepagesz=1G hugepages=16 isolcpus=2-7 nohz_full=2-7 rcu_nocbs=2-7 irqaffinity=0-1",
    'dyndbg="file drivers/vfio/* +p" splash',
]

REFUSED = [
    ("systemd.run=/bin/sh", "host's init or initramfs"),
    ("systemd.run_success_action=none", "host's init or initramfs"),
    ("systemd.setenv=LD_PRELOAD=/tmp/x.so", "host's init or initramfs"),
    ("systemd.unit=emergency.target", "host's init or initramfs"),
    ("systemd.wants=debug-shell.service", "host's init or initramfs"),
    ("systemd.mask=sshd.service", "host's init or initramfs"),
    ("systemd.debug_shell", "host's init or initramfs"),
    ("systemd.debug-shell=1", "host's init or initramfs"),
    ("rd.systemd.unit=emergency.target", "host's init or initramfs"),
    ("rd.break", "host's init or initramfs"),
    ("rd.shell", "host's init or initramfs"),
    ("break=premount", "host's init or initramfs"),
    ("LD_PRELOAD=/tmp/x.so", "its environment"),
    ('"LD_LIBRARY_PATH=/tmp"', "its environment"),
    ("single", "(an argument)"),
    ("S", "(an argument)"),
    ("1", "(an argument)"),
    ("emergency", "(an argument)"),
    ("-b", "(an argument)"),
    ("sysctl.kernel.modprobe=/tmp/x", "the kernel would run or load"),
    ("sysctl.kernel.core_pattern=|/tmp/x", "the kernel would run or load"),
    ("firmware_class.path=/tmp", "the kernel would run or load"),
    ("init=/bin/sh", "sets init="),
    ("quiet -- single", "arguments to init after '--'"),
]


@pytest.mark.parametrize("line", ACCEPTED)
def test_a_hosts_own_parameters_are_accepted(line: str) -> None:
    assert check_cmdline(line, "config.host_boot[0].cmdline") == line


@pytest.mark.parametrize(("word", "said"), REFUSED, ids=[w for w, _ in REFUSED])
def test_a_word_for_init_is_refused_naming_it_wherever_it_stands(word: str, said: str) -> None:
    for line in (word, f"spectre_v2=off {word}"):
        with pytest.raises(HarnessError) as refused:
            check_cmdline(line, "config.host_boot[0].cmdline")
        assert str(refused.value).startswith("config.host_boot[0].cmdline ") and said in str(refused.value)
