"""The rig's second kernel, from another suite's index (tests/rig/kernel_index.py) and its ELF
(tests/rig/kernel.py): the index read, the packages a kernel is split into, the 7.x layout moved
into kernel.py's, and the ELF found in a bzImage compressed either way. The real fetch and boot are
tests/integration/test_second_host_kernel.py's."""

from __future__ import annotations

import contextlib
import lzma
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from tests.rig import kernel, kernel_index
from vmharness.errors import HarnessError

INDEX = """Package: linux-image-amd64
Version: 7.3.4-1~bpo13+1
Depends: linux-image-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)

Package: linux-image-7.3.4+deb13-amd64
Version: 7.3.4-1~bpo13+1
Depends: linux-binary-7.3.4+deb13-amd64, linux-modules-7.3.4+deb13-amd64, linux-base-7.3.4+deb13-amd64
Filename: pool/main/l/linux/linux-image-7.3.4+deb13-amd64_7.3.4-1~bpo13+1_amd64.deb

Package: linux-binary-7.3.4+deb13-amd64
Version: 7.3.4-1~bpo13+1

Package: linux-modules-7.3.4+deb13-amd64
Version: 7.3.4-1~bpo13+1

Package: linux-base-7.3.4+deb13-amd64
Version: 7.3.4-1~bpo13+1

Package: linux-image-6.1.0-57-amd64
Version: 6.1.158-1
"""


def test_the_meta_package_leads_to_the_kernel_and_its_three_parts() -> None:
    index = kernel_index.packages(INDEX)
    image = kernel_index._depends_on(index, "linux-image-amd64", "linux-image-")
    assert image == "linux-image-7.3.4+deb13-amd64"
    assert kernel_index.parts(index, image) == [image, "linux-binary-7.3.4+deb13-amd64",
                                                "linux-modules-7.3.4+deb13-amd64", "linux-base-7.3.4+deb13-amd64"]
    # a kernel packaged whole, as bookworm's: itself alone
    assert kernel_index.parts(index, "linux-image-6.1.0-57-amd64") == ["linux-image-6.1.0-57-amd64"]
    with pytest.raises(HarnessError, match="no package linux-image-cloud-amd64"):
        kernel_index._depends_on(index, "linux-image-cloud-amd64", "linux-image-")
    with pytest.raises(HarnessError, match="depends on no linux-image-"):
        kernel_index._depends_on(index, "linux-binary-7.3.4+deb13-amd64", "linux-image-")


def test_without_the_index_the_tree_fetched_last_is_used_or_why_not_said(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def cache_lock() -> Iterator[Path]:
        yield tmp_path

    def unreachable(url: str) -> str:
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(kernel_index, "cache_lock", cache_lock)
    monkeypatch.setattr(kernel_index, "_index_text", unreachable)
    with pytest.raises(HarnessError, match=r"index could not be fetched .*name resolution"):
        kernel_index.obtain()
    tree = tmp_path / f"kernel-{kernel_index.SUITE}" / "linux-image-7.3.4+deb13-amd64"
    tree.mkdir(parents=True)
    kernel.mark_done(kernel.Kernel(tree.name, "7.3.4-1~bpo13+1", "7.3.4+deb13-amd64", tree))
    assert kernel_index.obtain() == kernel.Kernel(tree.name, "7.3.4-1~bpo13+1", "7.3.4+deb13-amd64", tree)


def test_the_7x_layout_is_moved_into_the_rigs(tmp_path: Path) -> None:
    tree = tmp_path / "usr" / "lib" / "modules" / "7.3.4+deb13-amd64"
    (tree / "kernel").mkdir(parents=True)
    for name in ("vmlinuz", "config", "System.map", "modules.builtin"):
        (tree / name).write_text(name)
    assert kernel_index._lay_out(tmp_path) == "7.3.4+deb13-amd64"
    assert (tmp_path / "boot" / "vmlinuz-7.3.4+deb13-amd64").read_text() == "vmlinuz"
    assert (tmp_path / "boot" / "config-7.3.4+deb13-amd64").read_text() == "config"
    assert (tmp_path / "lib" / "modules" / "7.3.4+deb13-amd64" / "modules.builtin").is_file()
    assert not (tmp_path / "usr").exists()


def test_a_tree_without_a_kernel_is_refused(tmp_path: Path) -> None:
    (tmp_path / "usr" / "lib" / "modules" / "7.3.4+deb13-amd64").mkdir(parents=True)
    with pytest.raises(HarnessError, match="hold no vmlinuz"):
        kernel_index._lay_out(tmp_path)


ELF = b"\x7fELF" + bytes(range(256)) * 64


@pytest.mark.parametrize("packed", [
    lzma.compress(ELF, format=lzma.FORMAT_XZ),
    zstandard.ZstdCompressor().compress(ELF),
])
def test_the_elf_is_found_in_a_bzimage_compressed_either_way(packed: bytes) -> None:
    # the setup code before the stream and the trailer after it (zstd's CLI stops there with an error)
    image = b"MZ" + b"\x00" * 1000 + packed + b"\x00\x10\x20\x30" * 8
    assert kernel._embedded_elf(image) == ELF


def test_a_magic_met_by_chance_before_the_stream_is_passed_over() -> None:
    image = b"MZ" + b"\x28\xb5\x2f\xfd not zstd" + lzma.compress(ELF, format=lzma.FORMAT_XZ) + b"\x00" * 8
    assert kernel._embedded_elf(image) == ELF


def test_a_bzimage_without_a_stream_it_can_read_gives_nothing() -> None:
    assert kernel._embedded_elf(b"MZ" + b"\x00" * 100) == b""
    assert kernel._embedded_elf(b"MZ\xfd7zXZ\x00 broken") == b""
