"""The KVM probe's Linux boot (kvm_boot): which kernel it boots, and the race between KVM's guest and
TCG's beside it, against a stand-in for QEMU (a script that acts out each guest by its -accel and -cpu)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from vmharness.host.inspect import kvm_boot

# Which kernel the probe boots.

def _image(folder: Path, name: str, mtime: float, files: tuple[str, ...] = ("vmlinuz", "vmlinux")) -> Path:
    (folder / name).mkdir(parents=True)
    (folder / name / "image.json").write_text("{}")
    for f in files:
        (folder / name / f).write_bytes(b"kernel")
        os.utime(folder / name / f, (mtime, mtime))
    return folder / name


@pytest.fixture()
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    images, boot = tmp_path / "images", tmp_path / "boot"
    images.mkdir()
    boot.mkdir()
    monkeypatch.setenv("VMHARNESS_IMAGE_DIR", str(images))
    monkeypatch.setattr(kvm_boot, "BOOT", str(boot))
    return images, boot


def test_the_newest_images_vmlinux_is_booted(places: tuple[Path, Path]) -> None:
    images, _ = places
    _image(images, "old", 1000.0)
    new = _image(images, "new", 2000.0)
    assert kvm_boot.find_kernel() == (new / "vmlinux", "the image new's kernel")


def test_an_image_without_vmlinux_gives_its_vmlinuz(places: tuple[Path, Path]) -> None:
    one = _image(places[0], "one", 1000.0, files=("vmlinuz",))
    assert kvm_boot.find_kernel() == (one / "vmlinuz", "the image one's kernel")


def test_links_unfinished_images_and_huge_files_are_passed_over(places: tuple[Path, Path]) -> None:
    images, boot = places
    linked = images / "linked"
    linked.mkdir()
    (linked / "image.json").write_text("{}")
    (linked / "vmlinuz").symlink_to("/etc/passwd")
    (images / "unfinished").mkdir()
    (images / "unfinished" / "vmlinuz").write_bytes(b"kernel")
    huge = _image(images, "huge", 3000.0, files=())
    with (huge / "vmlinuz").open("wb") as f:
        f.truncate(kvm_boot.KERNEL_MAX_BYTES + 1)
    assert kvm_boot.find_kernel() is None
    running = boot / f"vmlinuz-{os.uname().release}"
    running.write_bytes(b"kernel")
    assert kvm_boot.find_kernel() == (running, "the running host's kernel")


def test_an_image_folder_that_is_a_file_finds_no_image(places: tuple[Path, Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("VMHARNESS_IMAGE_DIR", str(tmp_path / "file"))
    assert kvm_boot.find_kernel() is None


# The race itself, against a stand-in for QEMU: a script that acts out a guest by its -accel and -cpu.

FAKE_QEMU = """\
import sys, time
args = sys.argv[1:]
accel, cpu = args[args.index("-accel") + 1].split(",")[0], args[args.index("-cpu") + 1] if "-cpu" in args else "default"
act = dict(a.split("=") for a in sys.argv[0].rsplit("/", 1)[1].split("+")[1:])[accel + "-" + cpu]
if act.startswith("fail"):
    sys.stderr.write("qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\\\\n")
    sys.exit(1)
if act.startswith("boot"):
    time.sleep(float(act[4:] or 0))
    print("[    0.000000] Linux version 6.1.0-50-amd64", flush=True)
    print("[    0.120000] Calibrating delay loop (skipped)", flush=True)
time.sleep(60)
"""


def fake_qemu(tmp_path: Path, **acts: str) -> str:
    """A QEMU whose guests act by name: kvm-host=boot0.3 (proof after 0.3 s), kvm-host=fail, tcg-max=hang."""
    path = tmp_path / "+".join(["qemu", *(f"{k.replace('_', '-')}={v}" for k, v in acts.items())])
    path.write_text(f"#!{sys.executable}\n{FAKE_QEMU}")
    path.chmod(0o755)
    return str(path)


def test_a_kvm_guest_that_proves_itself_ends_the_race_at_once(tmp_path: Path) -> None:
    # Every wrong ending lies 20 s or more away: TCG's proof and the floor at 20 s, the cap at 60 s.
    # A loaded machine makes the proof later by a second or two, never by twenty.
    qemu = fake_qemu(tmp_path, kvm_host="boot0.2", tcg_max="boot20")
    began = time.monotonic()
    result = kvm_boot.race(Path("/k"), "host", 20.0, 3.0, 60.0, qemu)
    took = time.monotonic() - began
    assert result.kvm.ok and result.tcg is None
    assert result.kvm.seconds is not None and result.kvm.seconds >= 0.2  # its proof comes 0.2 s after start
    assert result.deadline == 60.0  # TCG had proven nothing yet: the cap was in force, and not waited for
    assert took < 20.0  # ended at the proof, before the floor and TCG's proof


def test_a_hung_kvm_guest_fails_at_the_floor_when_tcg_is_quick(tmp_path: Path) -> None:
    # Quick: TCG proves itself as soon as its Python runs, well within 2 s even on a loaded machine,
    # so the floor (2 s) is above once (factor 1) its time.
    qemu = fake_qemu(tmp_path, kvm_host="hang", tcg_max="boot0")
    began = time.monotonic()
    result = kvm_boot.race(Path("/k"), "host", 2.0, 1.0, 30.0, qemu)
    took = time.monotonic() - began
    assert not result.kvm.ok and not result.kvm.exited and result.deadline == 2.0, result
    assert result.kvm.detail == "the kernel did not print its banner within 2 s (nothing on its console)"
    assert result.tcg is not None and result.tcg.ok
    assert result.tcg.detail == "the kernel printed its banner and then 'Calibrating delay loop'"
    assert 2.0 <= took < 30.0  # the floor, never the 30 s cap


def test_a_slow_machine_gives_kvm_a_multiple_of_tcgs_time(tmp_path: Path) -> None:
    # TCG needs 1 s: KVM's guest, proving itself at 1.2 s, is past the 0.5 s floor but within 3 x 1 s
    # (with 1.8 s to spare for a loaded machine starting one fake later than the other).
    qemu = fake_qemu(tmp_path, kvm_host="boot1.2", tcg_max="boot1")
    result = kvm_boot.race(Path("/k"), "host", 0.5, 3.0, 30.0, qemu)
    assert result.kvm.ok, result


def test_a_hung_kvm_guest_on_a_slow_machine_is_given_a_multiple_of_tcgs_time(tmp_path: Path) -> None:
    qemu = fake_qemu(tmp_path, kvm_host="hang", tcg_max="boot0.4")
    result = kvm_boot.race(Path("/k"), "host", 0.2, 3.0, 30.0, qemu)
    # Three times what TCG took (its proof after 0.4 s at least, later on a loaded machine), however long
    # that was: the deadline follows TCG's measured time, not a window.
    assert result.tcg is not None and result.tcg.ok and result.tcg.seconds is not None and result.tcg.seconds >= 0.4
    assert result.deadline == pytest.approx(3 * result.tcg.seconds, abs=3 * 0.005 + 1e-9)
    assert result.kvm.detail == ("the kernel did not print its banner within 3 times the time it took under TCG "
                                 "(nothing on its console)")


def test_qemu_refusing_its_arguments_under_kvm_is_reported_with_its_error(tmp_path: Path) -> None:
    qemu = fake_qemu(tmp_path, kvm_host="fail", tcg_max="boot0")
    result = kvm_boot.race(Path("/k"), "host", 5.0, 3.0, 30.0, qemu)
    assert result.kvm.exited and result.tcg is None
    assert "QEMU exited with status 1 before the kernel printed its banner" in result.kvm.detail
    assert "failed to set MSR 0x10a" in result.kvm.detail


def test_the_default_cpu_model_passes_no_cpu_argument(tmp_path: Path) -> None:
    qemu = fake_qemu(tmp_path, kvm_default="boot0", tcg_max="hang")
    assert kvm_boot.race(Path("/k"), None, 5.0, 3.0, 30.0, qemu).kvm.ok


def test_a_missing_qemu_is_named(tmp_path: Path) -> None:
    result = kvm_boot.race(Path("/k"), "host", 5.0, 3.0, 30.0, str(tmp_path / "no-such-qemu"))
    assert result.kvm.exited and "no-such-qemu" in result.kvm.detail


@pytest.mark.parametrize(("tcg_proof", "tcg_over", "want"), [
    (None, False, 150.0),  # TCG still booting: KVM may take as long
    (None, True, 5.0),  # TCG gave up without proof: the floor
    (0.7, False, 5.0),  # a quick machine: the floor
    (20.0, False, 60.0),  # the rig's L1: three times TCG's time
    (80.0, False, 150.0),  # never past the cap
])
def test_kvm_deadline(tcg_proof: float | None, tcg_over: bool, want: float) -> None:
    assert kvm_boot.kvm_deadline(tcg_proof, tcg_over, 5.0, 3.0, 150.0) == want
