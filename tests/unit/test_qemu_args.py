"""An instance's qemu_args (model/qemu_args.py): an allow-list of -global DRIVER.PROPERTY=VALUE and
-smbios type=N,FIELD=VALUE,..., read with the configuration. Every option that could run a program,
open a socket or a port, read or write a host file or loosen QEMU is refused by name, in every
spelling (`--opt`, `-opt=value`, hidden in the value of an allowed option, a bare word), with one
error naming the key and the string; what the project's own tests, docs and examples write loads.
tests/unit/test_hostile_values.py runs some of these through `vmharness run --print-xml`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmharness.errors import HarnessError
from vmharness.model import config, qemu_args

KEY = "config.instance[0].qemu_args"

# (qemu_args, the index refused, what the error says)
FORBIDDEN = [
    (["-incoming", "exec:touch /tmp/vmh-x"], 0, "'-incoming' is not allowed"),
    (["-netdev", "tap,id=n0,script=/tmp/vmh-x"], 0, "'-netdev' is not allowed"),
    (["-plugin", "file=/tmp/vmh-x.so"], 0, "'-plugin' is not allowed"),
    (["-monitor", "tcp::4444,server,nowait"], 0, "'-monitor' is not allowed"),
    (["-chardev", "file,id=c0,path=/tmp/vmh-x"], 0, "'-chardev' is not allowed"),
    (["-serial", "pipe:/tmp/vmh-x"], 0, "'-serial' is not allowed"),
    (["-serial", "tcp::5555,server"], 0, "'-serial' is not allowed"),
    (["-serial", "unix:/tmp/vmh-s,server"], 0, "'-serial' is not allowed"),
    (["-parallel", "file:/tmp/vmh-x"], 0, "'-parallel' is not allowed"),
    (["-qmp", "unix:/tmp/vmh-q,server"], 0, "'-qmp' is not allowed"),
    (["-add-fd", "fd=3,set=1"], 0, "'-add-fd' is not allowed"),
    (["-object", "memory-backend-file,id=m0,mem-path=/tmp/vmh-x,size=1G"], 0, "'-object' is not allowed"),
    (["-drive", "file=/etc/shadow,format=raw"], 0, "'-drive' is not allowed"),
    (["-blockdev", "driver=file,filename=/etc/shadow,node-name=d0"], 0, "'-blockdev' is not allowed"),
    (["-loadvm", "snap"], 0, "'-loadvm' is not allowed"),
    (["-trace", "file=/tmp/vmh-x"], 0, "'-trace' is not allowed"),
    (["-D", "/tmp/vmh-log"], 0, "'-D' is not allowed"),
    (["-pidfile", "/tmp/vmh-pid"], 0, "'-pidfile' is not allowed"),
    (["-daemonize"], 0, "'-daemonize' is not allowed"),
    (["-L", "/tmp"], 0, "'-L' is not allowed"),
    (["-bios", "/tmp/vmh-bios"], 0, "'-bios' is not allowed"),
    (["-kernel", "/tmp/vmh-k"], 0, "'-kernel' is not allowed"),
    (["-initrd", "/tmp/vmh-i"], 0, "'-initrd' is not allowed"),
    (["-readconfig", "/tmp/vmh-c"], 0, "'-readconfig' is not allowed"),
    (["-writeconfig", "/tmp/vmh-c"], 0, "'-writeconfig' is not allowed"),
    (["-netdev", "user,id=n0,smb=/"], 0, "'-netdev' is not allowed"),
    (["-netdev", "user,id=n0,hostfwd=tcp::2222-:22"], 0, "'-netdev' is not allowed"),
    (["-fsdev", "local,id=f0,path=/,security_model=none"], 0, "'-fsdev' is not allowed"),
    (["-virtfs", "local,path=/,mount_tag=h,security_model=none"], 0, "'-virtfs' is not allowed"),
    (["-device", "isa-serial,chardev=c0"], 0, "'-device' is not allowed"),
    (["-sandbox", "off"], 0, "'-sandbox' is not allowed"),
    (["-run-with", "user=root"], 0, "'-run-with' is not allowed"),
    (["-runas", "root"], 0, "'-runas' is not allowed"),
    (["-chroot", "/"], 0, "'-chroot' is not allowed"),
    (["-gdb", "tcp::1234"], 0, "'-gdb' is not allowed"),
    (["-s"], 0, "'-s' is not allowed"),
    (["-option-rom", "/tmp/vmh-rom"], 0, "'-option-rom' is not allowed"),
    (["-fw_cfg", "name=opt/x,file=/etc/shadow"], 0, "'-fw_cfg' is not allowed"),
    (["-mem-path", "/tmp"], 0, "'-mem-path' is not allowed"),
    (["-cpu", "max,mds-no=on"], 0, "'-cpu' is not allowed"),
    (["-machine", "q35,accel=kvm"], 0, "'-machine' is not allowed"),
    (["-sandbox=off"], 0, "'-sandbox=off' is not allowed"),  # an option joined to its value
    (["-monitor=tcp::4444"], 0, "'-monitor=tcp::4444' is not allowed"),
    (["-global=e1000.romfile=x"], 0, "'-global=e1000.romfile=x' is not allowed"),
    (["--monitor", "stdio"], 0, "'--monitor' is not allowed"),  # QEMU reads --opt as -opt
    (["--global", "ICH9-LPC.noreboot=off"], 0, "'--global' is not allowed"),
    (["-global ICH9-LPC.noreboot=off"], 0, "is not allowed"),  # two words in one string
    (["/etc/shadow"], 0, "is not an option (QEMU would open it as a disk image)"),
    (["-global", "ICH9-LPC.noreboot=off", "-monitor", "stdio"], 2, "'-monitor' is not allowed"),
    (["-global", "ICH9-LPC.noreboot=off", "/etc/shadow"], 2, "is not an option"),
    (["-global"], 0, "-global has no value"),
    # options hidden in the value of an allowed one
    (["-global", "-monitor"], 1, "is not DRIVER.PROPERTY=VALUE"),
    (["-global", "driver=e1000,property=romfile,value=x"], 1, "is not DRIVER.PROPERTY=VALUE"),
    (["-global", "ICH9-LPC.noreboot=off,chardev=c0"], 1, "has a value that is not"),
    (["-global", "kvm-pit.lost_tick_policy=$(touch /tmp/vmh-x)"], 1, "has a value that is not"),
    (["-global", "e1000.romfile=efi-e1000.rom"], 1, "the property romfile, which names a file"),
    (["-global", "isa-serial.chardev=c0"], 1, "the property chardev, which names a dev"),
    (["-global", "virtio-blk-pci.drive=d0"], 1, "the property drive"),
    (["-global", "vfio-pci.host=0000:00:1f.2"], 1, "the property host"),
    (["-global", "vfio-pci.sysfsdev=x"], 1, "the property sysfsdev"),
    (["-global", "loader.file=vmlinuz"], 1, "the property file"),
    (["-global", "pc-dimm.memdev=m0"], 1, "the property memdev"),
    (["-global", "max-x86_64-cpu.mds-no=on"], 1, "the CPU property mds-no"),  # past the *-no claim check
    (["-global", "cpu.md-clear=off"], 1, "the CPU property md-clear"),
    (["-global", "device.arch-capabilities=on"], 1, "the CPU property arch-capabilities"),
    (["-global", "x86_64-cpu.pcid=on"], 1, "the CPU property pcid"),
    (["-smbios", "file=/etc/shadow"], 1, "does not start with type=N"),
    (["-smbios", "type=11,path=/etc/shadow"], 1, "does not start with type=N"),
    (["-smbios", "type=1,product=x,file=/etc/shadow"], 1, "the field 'file'"),
    (["-smbios", "type=1,product=a b"], 1, "a value of product that is not"),
    (["-smbios", "type=1,product=a,product=b"], 1, "the field product twice"),
]

# what the project itself writes: tests/integration/test_experiment.py, docs/run.md, docs/notes-hypervisor.md
ACCEPTED = [
    [],
    ["-smbios", "type=1,manufacturer=vmharness,product=instance-good"],
    ["-global", "kvm-pit.lost_tick_policy=delay"],
    ["-global", "ICH9-LPC.noreboot=off"],
    ["-global", "max-x86_64-cpu.family=23", "-global", "max-x86_64-cpu.model=49"],
    ["-global", "max-x86_64-cpu.vendor=GenuineIntel", "-global", "max-x86_64-cpu.stepping=1"],
    ["-smbios", "type=0,vendor=lab,version=1.2"],
]


def _load(tmp_path: Path, args: list[str]) -> tuple[str, ...]:
    path = tmp_path / "r.toml"
    path.write_text(f'[[instance]]\nname = "a"\nqemu_args = {json.dumps(args)}\n')
    return config.load_run(path).instance[0].qemu_args


@pytest.mark.parametrize(("args", "index", "said"), FORBIDDEN, ids=[" ".join(a)[:40] for a, _, _ in FORBIDDEN])
def test_an_option_outside_the_allow_list_is_refused_by_name(tmp_path: Path, args: list[str], index: int,
                                                             said: str) -> None:
    with pytest.raises(HarnessError) as err:
        _load(tmp_path, args)
    assert err.value.message.startswith(f"{KEY}[{index}] "), err.value.message
    assert said in err.value.message, err.value.message
    assert "-global" in err.value.hint and "-smbios" in err.value.hint
    assert "\n" not in err.value.message + err.value.hint


@pytest.mark.parametrize("args", ACCEPTED, ids=[" ".join(a)[:40] or "none" for a in ACCEPTED])
def test_what_the_project_writes_loads_unchanged(tmp_path: Path, args: list[str]) -> None:
    assert _load(tmp_path, args) == tuple(args)


def test_the_docs_examples_are_accepted() -> None:
    """The examples docs/run.md gives for qemu_args pass the same check."""
    text = (Path(__file__).resolve().parents[2] / "docs/run.md").read_text()
    assert '["-global", "kvm-pit.lost_tick_policy=delay"]' in text
    assert qemu_args.check(("-global", "kvm-pit.lost_tick_policy=delay"), KEY)


def test_a_resumed_runs_manifest_is_checked_as_the_file_is() -> None:
    """A run folder from someone else: its manifest's qemu_args go through the same allow-list."""
    with pytest.raises(HarnessError, match=r"qemu_args\[0\] '-monitor' is not allowed"):
        config.run_from_json({"instance": [{"name": "a", "qemu_args": ["-monitor", "tcp::4444"]}]})
