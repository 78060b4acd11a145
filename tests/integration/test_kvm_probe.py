"""The KVM probe on this machine: its tiny guest's code checked on its own (QEMU under TCG boots the same
bytes as a boot sector), and its verdict here, where /dev/kvm is PVM: the tiny guest runs, a standard
kernel does not, and the probe says so."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.rig import kernel
from vmharness.host.inspect import kvm, kvm_boot, kvm_memo, kvm_probe
from vmharness.system import proc

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86 not installed")
def test_probe_code_runs_under_tcg(tmp_path: Path) -> None:
    disk, serial = tmp_path / "boot.img", tmp_path / "serial.out"
    sector = kvm_probe.CODE + bytes(510 - len(kvm_probe.CODE)) + b"\x55\xaa"
    disk.write_bytes(sector + bytes(1024 * 1024 - 512))
    res = proc.run([
        "qemu-system-x86_64", "-accel", "tcg", "-machine", "q35", "-m", "64", "-display", "none",
        "-nodefaults", "-no-reboot", "-serial", f"file:{serial}",
        "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
        "-drive", f"file={disk},format=raw,if=ide",
    ], timeout=60, check=False)
    # isa-debug-exit turns the guest's final write of 0 into exit status (0 << 1) | 1
    assert res.returncode == 1, res.stderr
    assert serial.read_bytes() == bytes([kvm_probe.PROBE_VALUE])


@pytest.fixture(scope="module")
def rig_kernel() -> tuple[Path, str]:
    """The Debian kernel the rig boots (fetched into the cache): a standard kernel, built image or not."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86 not installed")
    k = kernel.obtain()
    return k.boot_image, f"Debian's {k.release}"


def test_the_tiny_guest_reaches_long_mode_where_kvm_runs_at_all() -> None:
    """With its CPUID set (KVM_SET_CPUID2) the tiny guest runs on a working KVM and on a PVM one alike;
    before, it triple-faulted on both."""
    if not Path("/dev/kvm").exists():
        pytest.skip("this machine has no /dev/kvm")
    result = kvm.long_mode()
    assert result.usable, result.detail
    assert "entered long mode" in result.detail


@pytest.mark.skipif(not Path(kvm.PVM_MODULE).exists(), reason="not a PVM host (DESIGN.md: the development "
                    "and CI machines are)")
def test_on_a_pvm_host_kvm_is_not_usable_for_a_linux_guest_and_the_probe_says_why(
        rig_kernel: tuple[Path, str]) -> None:
    began = time.monotonic()
    result = kvm.probe(kernel=rig_kernel)
    seconds = time.monotonic() - began
    data = result.to_json()
    assert result.usable is False, result.detail
    assert data["long_mode"] == {"ok": True, "detail": data["long_mode"]["detail"]}  # type: ignore[index]
    assert "this /dev/kvm cannot run a standard kernel (kvm_pvm is loaded" in result.detail
    # the same kernel under TCG beside it proved itself: the kernel and the check are sound, KVM is not
    assert "while under TCG the kernel printed its banner and then" in result.detail
    assert seconds < 3 * kvm.LINUX_TIMEOUT, f"the probe took {seconds:.1f} s"


def test_a_real_kernels_proof_is_seen(rig_kernel: tuple[Path, str], tmp_path: Path) -> None:
    """The positive control on any machine: a QEMU that runs the "KVM" guest under TCG (-cpu max) wins the
    race, so the console check recognises a real kernel's boot."""
    real = shutil.which("qemu-system-x86_64")
    wrapper = tmp_path / "qemu-tcg"
    wrapper.write_text(f"""#!{sys.executable}
import os, sys
args = ["max" if a == "host" else "tcg" if a == "kvm" else a for a in sys.argv[1:]]
os.execv({real!r}, [{real!r}, *args])
""")
    wrapper.chmod(0o755)
    path, _ = rig_kernel
    race = kvm_boot.race(path, "host", 30.0, 3.0, 60.0, str(wrapper))
    assert race.kvm.ok, race
    assert race.kvm.seconds is not None and race.kvm.seconds < 30.0


def test_probe_reports_on_this_host() -> None:
    if not Path("/dev/kvm").exists():
        pytest.skip("this machine has no /dev/kvm")
    result = kvm.probe()
    assert result.detail
    data = result.to_json()
    assert isinstance(data["usable"], bool) and "long_mode" in data


def test_a_probe_that_cannot_start_in_time_says_so() -> None:
    result = kvm.long_mode(startup=0.001)  # no Python starts in a millisecond
    assert not result.usable and "did not get to run its guest within 0.001 s" in result.detail


def test_a_second_command_takes_the_answer_the_first_kept(tmp_path: Path) -> None:
    """Two commands, each its own process: the first probes and keeps its answer (host/inspect/kvm_memo.py),
    the second takes it without probing (the file is not written again) and answers the same."""
    if not Path("/dev/kvm").exists():
        pytest.skip("this machine has no /dev/kvm")
    kept = kvm_memo.STATE_DIR / kvm_memo.NAME
    kept.unlink(missing_ok=True)
    ask = [sys.executable, "-c", "import json; from vmharness.host.inspect import kvm; "
                                 "print(json.dumps(kvm.probe().to_json(), sort_keys=True))"]
    first = proc.run(ask, timeout=300)
    written = kept.stat()
    second = proc.run(ask, timeout=300)
    again = kept.stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns), "probed again"
    assert first.stdout == second.stdout and json.loads(kept.read_text())["answer"] == json.loads(first.stdout)


def test_a_libvirtd_started_and_stopped_between_two_commands_does_not_make_the_second_probe(tmp_path: Path) -> None:
    """The harness's libvirtd (host/libvirt/daemon.py) sets /dev/kvm's group and mode as udev leaves them
    and puts them back: the node's change time moves, nothing the probe depends on does. Before, the key
    held that change time, and every test module's libvirtd cost the next command the probe again."""
    if not Path("/dev/kvm").exists():
        pytest.skip("this machine has no /dev/kvm")
    from vmharness.host.libvirt import daemon

    kept = kvm_memo.STATE_DIR / kvm_memo.NAME
    ask = [sys.executable, "-c", "from vmharness.host.inspect import kvm; kvm.probe()"]
    proc.run(ask, timeout=300)
    written, node = kept.stat(), Path("/dev/kvm").stat()
    time.sleep(0.01)
    with daemon.running():
        pass
    assert Path("/dev/kvm").stat().st_ctime_ns != node.st_ctime_ns  # what once made the next command probe
    proc.run(ask, timeout=300)
    again = kept.stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns), "probed again"
