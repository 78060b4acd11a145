"""The image recipe, its cache key and the checks on a researcher's kernel (no build here)."""

from __future__ import annotations

import gzip
import lzma
import shutil
import struct
from pathlib import Path

import pytest

from vmharness import data
from vmharness.cli import main as cli
from vmharness.errors import HarnessError
from vmharness.guest import image, imagebuild, kernelfile
from vmharness.guest.kernelinput import kernel_input
from vmharness.guest.recipe import host_mirror, load_recipe
from vmharness.system import proc
from vmharness.system.machine import Machine, for_uri


def _recipe_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "recipe"
    shutil.copytree(data.IMAGE_RECIPE, folder)
    return folder


def test_the_shipped_recipe_loads() -> None:
    recipe = load_recipe()
    assert "nginx-light" in recipe.packages and "qemu-guest-agent" in recipe.packages
    assert "hooks/customize.sh" in recipe.files
    assert recipe.cmdline.startswith("root=/dev/vda")


def test_key_changes_with_any_file_and_nothing_else(tmp_path: Path) -> None:
    folder = _recipe_copy(tmp_path)
    key = load_recipe(folder).key()
    assert load_recipe(folder).key() == key
    hostname = folder / "overlay" / "etc" / "hostname"
    hostname.write_text("other\n")
    changed = load_recipe(folder).key()
    assert changed != key
    (folder / "overlay" / "etc" / "motd").write_text("hi\n")
    assert load_recipe(folder).key() not in (key, changed)
    latest = load_recipe(folder).key()
    (folder / "README.md").write_text("words about the recipe\n")
    assert load_recipe(folder).key() == latest


def test_key_changes_with_a_kernel(tmp_path: Path) -> None:
    folder = _recipe_copy(tmp_path)
    bz = _bzimage(tmp_path / "bz", "6.12.0-test")
    with_kernel = load_recipe(folder, kernel_input(str(bz), None))
    assert with_kernel.key() != load_recipe(folder).key()


def test_recipe_errors_name_the_setting(tmp_path: Path) -> None:
    folder = _recipe_copy(tmp_path)
    toml = folder / "recipe.toml"
    toml.write_text(toml.read_text().replace("free_mib = 512", "free_mib = \"lots\""))
    with pytest.raises(HarnessError, match="free_mib must be a int"):
        load_recipe(folder)
    toml.write_text(toml.read_text().replace("free_mib = \"lots\"", "free_mib = 1\ncolour = 3"))
    with pytest.raises(HarnessError, match="unknown setting colour"):
        load_recipe(folder)
    toml.write_text("suite = [")
    with pytest.raises(HarnessError, match=r"recipe\.toml"):
        load_recipe(folder)
    with pytest.raises(HarnessError, match="no image recipe"):
        load_recipe(tmp_path / "nowhere")


def test_mirror_comes_from_the_hosts_apt_sources(tmp_path: Path) -> None:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert host_mirror("bookworm", apt) == "http://mirror.example/debian"
    (apt / "sources.list.d" / "debian.sources").unlink()
    (apt / "sources.list").write_text("deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert host_mirror("bookworm", apt) == "http://old.example/debian"
    assert host_mirror("trixie", apt) == "http://deb.debian.org/debian"


def _bzimage(path: Path, version: str) -> Path:
    """The parts of an x86 boot header that matter here: boot flag, HdrS, kernel_version offset."""
    data = bytearray(0x800)
    data[0x1FE:0x200] = b"\x55\xaa"
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", data, 0x20E, 0x400 - 0x200)
    text = f"{version} (builder@host) #1 SMP PREEMPT_DYNAMIC".encode()
    data[0x400:0x400 + len(text)] = text
    path.write_bytes(bytes(data))
    return path


def test_bzimage_release_is_read_from_the_header(tmp_path: Path) -> None:
    assert kernelfile.bzimage_release(_bzimage(tmp_path / "bz", "6.12.0-rc3+")) == "6.12.0-rc3+"


def test_a_file_that_is_not_a_kernel_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "vmlinuz"
    bad.write_bytes(b"\x7fELF" + b"\0" * 2000)
    with pytest.raises(HarnessError, match="is not a Linux kernel"):
        kernelfile.bzimage_release(bad)
    (tmp_path / "short").write_bytes(b"tiny")
    with pytest.raises(HarnessError, match="is not a Linux kernel"):
        kernelfile.bzimage_release(tmp_path / "short")


def _vmlinux(path: Path, version: str, note_type: int) -> Path:
    """An ELF64 header, one PT_NOTE program header, one note ("Xen", `note_type`), a version string."""
    data = bytearray(0x400)
    data[0:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", data, 0x20, 0x40)  # e_phoff
    struct.pack_into("<HH", data, 0x36, 56, 1)  # e_phentsize, e_phnum
    note = struct.pack("<III", 4, 4, note_type) + b"Xen\0" + b"\0\0\0\1"
    struct.pack_into("<I", data, 0x40, 4)  # p_type PT_NOTE
    struct.pack_into("<Q", data, 0x40 + 8, 0x100)  # p_offset
    struct.pack_into("<Q", data, 0x40 + 32, len(note))  # p_filesz
    data[0x100:0x100 + len(note)] = note
    text = f"Linux version {version} (builder@host) #1 SMP".encode()
    data[0x200:0x200 + len(text)] = text
    path.write_bytes(bytes(data))
    return path


def test_a_vmlinux_boots_only_with_a_pvh_entry(tmp_path: Path) -> None:
    assert kernelfile.kernel_release(_vmlinux(tmp_path / "vmlinux", "6.13.0-lab", 18)) == "6.13.0-lab"
    with pytest.raises(HarnessError, match="vmlinux without a PVH entry point"):
        kernelfile.kernel_release(_vmlinux(tmp_path / "other", "6.13.0-lab", 17))
    assert kernelfile.kernel_release(_bzimage(tmp_path / "bz", "6.12.0")) == "6.12.0"


def _packed(path: Path, payload: bytes, protocol: int = 0x20F) -> Path:
    """A bzImage whose setup header points at `payload` (4 setup sectors, then the payload)."""
    data = bytearray(5 * 512)
    data[0x1F1] = 4
    data[0x1FE:0x200] = b"\x55\xaa"
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", data, 0x206, protocol)
    struct.pack_into("<II", data, 0x248, 0x10, len(payload))
    path.write_bytes(bytes(data) + b"\0" * 0x10 + payload + b"\0" * 64)
    return path


def test_the_vmlinux_inside_a_bzimage_is_taken_out_when_it_boots_through_pvh(tmp_path: Path) -> None:
    elf = _vmlinux(tmp_path / "vmlinux", "6.1.0-test", 18).read_bytes()
    assert kernelfile.uncompressed(_packed(tmp_path / "xz", lzma.compress(elf, lzma.FORMAT_XZ))) == elf
    assert kernelfile.uncompressed(_packed(tmp_path / "gz", gzip.compress(elf))) == elf
    no_pvh = _vmlinux(tmp_path / "other", "6.1.0-test", 17).read_bytes()
    assert kernelfile.uncompressed(_packed(tmp_path / "nopvh", lzma.compress(no_pvh, lzma.FORMAT_XZ))) is None
    assert kernelfile.uncompressed(_packed(tmp_path / "zstd", b"\x28\xb5\x2f\xfd" + elf)) is None  # not undone here
    broken = lzma.compress(elf, lzma.FORMAT_XZ)[:-40]
    assert kernelfile.uncompressed(_packed(tmp_path / "cut", broken)) is None
    assert kernelfile.uncompressed(_packed(tmp_path / "old", gzip.compress(elf), protocol=0x207)) is None
    assert kernelfile.uncompressed(_bzimage(tmp_path / "bz", "6.12.0")) is None  # an empty payload
    (tmp_path / "tiny").write_bytes(b"MZ")
    assert kernelfile.uncompressed(tmp_path / "tiny") is None
    assert kernelfile.uncompressed(_packed(tmp_path / "short", lzma.compress(elf[:0x30], lzma.FORMAT_XZ))) is None
    half = tmp_path / "half"
    half.write_bytes(elf[:0x48])
    with pytest.raises(HarnessError, match="vmlinux without a PVH entry point"):  # an ELF cut short: no traceback
        kernelfile.kernel_release(half)


def test_modules_must_match_the_kernel(tmp_path: Path) -> None:
    bz = _bzimage(tmp_path / "bz", "6.12.0")
    mods = tmp_path / "lib" / "modules" / "6.11.0"
    (mods / "kernel").mkdir(parents=True)
    with pytest.raises(HarnessError, match=r"does not match the kernel's release 6\.12\.0"):
        kernel_input(str(bz), str(mods))
    with pytest.raises(HarnessError, match="is not a modules tree"):
        kernel_input(str(bz), str(tmp_path))
    good = tmp_path / "lib" / "modules" / "6.12.0"
    (good / "kernel").mkdir(parents=True)
    with pytest.raises(HarnessError, match=r"no \.config found for kernel 6\.12\.0") as err:
        kernel_input(str(bz), str(good))
    assert err.value.hint == "pass --kernel-config PATH, the .config of the kernel build"
    (tmp_path / "config-6.12.0").write_text("CONFIG_RD_GZIP=y\n")  # Debian's layout: beside the kernel
    k = kernel_input(str(bz), str(good))
    assert k is not None and k.release == "6.12.0" and k.modules == good
    assert k.config == tmp_path / "config-6.12.0"
    with pytest.raises(HarnessError, match="--modules needs --kernel"):
        kernel_input(None, str(good))


def test_image_build_with_a_bad_kernel_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notakernel"
    bad.write_text("hello\n")
    code = cli.main(["image", "build", "--kernel", str(bad), "--image-dir", str(tmp_path / "images")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[0] == f"error: {bad} is not a Linux kernel (no x86 boot header)"
    assert not (tmp_path / "images").exists()


def test_a_missing_image_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["vm", "up", "--image", str(tmp_path / "nothing"), "--accel", "tcg"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: no image in {tmp_path / 'nothing'}")
    assert "hint: build one with: vmharness image build" in err


def test_libvirt_uri_names_the_machine() -> None:
    assert for_uri("qemu:///system") == Machine()
    assert for_uri("qemu+ssh://root@server1/system") == Machine("root@server1")
    assert for_uri("qemu+ssh://server1/system?no_tty=1").argv(["qemu-img", "info", "a b"]) == \
        ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", "server1", "env LC_ALL=C qemu-img info 'a b'"]


def test_a_kernel_package_is_read_with_dpkg_deb(tmp_path: Path) -> None:
    """A real (tiny) package made by dpkg-deb: its name and the release of the vmlinuz it carries."""
    tree = tmp_path / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: linux-image-6.12.9-lab\nVersion: 1\nArchitecture: amd64\nMaintainer: lab <lab@lab.invalid>\n"
        "Description: test kernel\n")
    (tree / "boot").mkdir()
    _bzimage(tree / "boot" / "vmlinuz-6.12.9-lab", "6.12.9-lab")
    deb = tmp_path / "linux-image-6.12.9-lab_1_amd64.deb"
    proc.run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(deb)], timeout=60)
    k = kernel_input(str(deb), None)
    assert k is not None and (k.release, k.deb) == ("6.12.9-lab", deb)
    assert kernelfile.deb_kernel(deb).package == "linux-image-6.12.9-lab"
    headers = tmp_path / "headers.deb"
    (tree / "boot" / "vmlinuz-6.12.9-lab").unlink()
    proc.run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(headers)], timeout=60)
    with pytest.raises(HarnessError, match="holds no /boot/vmlinuz"):
        kernel_input(str(headers), None)
    with pytest.raises(HarnessError, match="is not a Debian package"):
        kernel_input(str(_bzimage(tmp_path / "fake.deb", "1.0")), None)


def test_a_second_build_waits_for_the_first_and_finds_its_image(tmp_path: Path) -> None:
    import fcntl
    import os
    import threading

    recipe = load_recipe()
    images = tmp_path / "images"
    images.mkdir()
    said: list[str] = []
    heard = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        heard.set()

    got: list[tuple[image.Image, bool]] = []
    holder = os.open(images / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # the first build, still running
    waiter = threading.Thread(target=lambda: got.append(imagebuild.build(recipe, images, say)))
    waiter.start()
    assert heard.wait(timeout=60)  # its first word, however late a loaded machine lets it say it
    assert waiter.is_alive() and said == [f"waiting for another image build in {images}"]
    done = images / recipe.key()  # what the first build leaves, then lets go
    done.mkdir()
    for name in ("disk.qcow2", "vmlinuz"):
        (done / name).write_bytes(b"x")
    (done / "image.json").write_text('{"cmdline": "root=/dev/vda", "kernel_release": "6.1.0"}')
    os.close(holder)
    waiter.join(timeout=60)
    assert got and got[0][1] is False and got[0][0].folder == done  # found, not built again
