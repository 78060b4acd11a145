"""A recipe's base tree (vmharness/guest/basetree.py) with the real GNU tar, as root, on a small tree:
what it keeps and gives back, which builds use it, and what it refuses to read or write."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from vmharness import data
from vmharness.errors import HarnessError
from vmharness.guest import basetree
from vmharness.guest.kernelinput import KernelInput
from vmharness.guest.recipe import Recipe, load_recipe


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    folder = tmp_path / "recipe"
    shutil.copytree(data.IMAGE_RECIPE, folder)
    return load_recipe(folder)


def _with_bzimage(recipe: Recipe, tmp_path: Path, release: str) -> Recipe:
    bz = tmp_path / f"vmlinuz-{release}"
    bz.write_bytes(release.encode())
    return replace(recipe, kernel=KernelInput(release, kernel=bz))


def _a_root(root: Path) -> None:
    """What a Debian root holds that a careless copy loses: owners by number, a setuid mode, a device
    node, a hard link, a symlink out of the tree, a file capability."""
    (root / "usr/bin").mkdir(parents=True)
    (root / "dev").mkdir()
    tool = root / "usr/bin/tool"
    tool.write_text("#!/bin/sh\n")
    os.chown(tool, 0, 4242)
    tool.chmod(0o4755)
    os.link(tool, root / "usr/bin/tool-again")
    os.symlink("/usr/bin/tool", root / "usr/bin/link")
    os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    ping = root / "usr/bin/ping"
    ping.write_text("")
    # cap_net_raw=ep as the kernel stores it (vfs_cap_data revision 2)
    os.setxattr(ping, "security.capability",
                bytes.fromhex("01000002") + (1 << 13).to_bytes(4, "little") + bytes(12))


def test_the_keys_of_a_base_and_its_images(recipe: Recipe, tmp_path: Path) -> None:
    """The recipe's own image is its base; images with a kernel each have a key of their own and the
    base's key for their root."""
    one, two = (_with_bzimage(recipe, tmp_path, r) for r in ("6.12.0-a", "6.12.0-b"))
    assert recipe.base_key() == recipe.key()
    assert one.base_key() == two.base_key() == recipe.base_key()
    assert len({recipe.key(), one.key(), two.key()}) == 3


def test_a_kept_base_comes_back_as_it_was_for_a_kernel_of_the_researchers(recipe: Recipe, tmp_path: Path) -> None:
    images, work = tmp_path / "images", tmp_path / "images/.build-1"
    work.mkdir(parents=True)
    _a_root(work / "rootfs")
    basetree.keep(recipe, images, work / "rootfs", work)
    assert not (work / "base.tar").exists() and basetree.path(recipe, images).is_file()

    back = tmp_path / "back"
    assert basetree.restore(_with_bzimage(recipe, tmp_path, "6.12.0-a"), images, back)
    tool = back / "usr/bin/tool"
    assert (tool.stat().st_uid, tool.stat().st_gid, stat.S_IMODE(tool.stat().st_mode)) == (0, 4242, 0o4755)
    assert tool.stat().st_ino == (back / "usr/bin/tool-again").stat().st_ino
    assert os.readlink(back / "usr/bin/link") == "/usr/bin/tool"
    node = (back / "dev/null").lstat()
    assert stat.S_ISCHR(node.st_mode) and os.major(node.st_rdev) == 1 and os.minor(node.st_rdev) == 3
    assert os.getxattr(back / "usr/bin/ping", "security.capability") == os.getxattr(
        work / "rootfs/usr/bin/ping", "security.capability")


def test_only_a_build_with_a_bzimage_starts_from_a_base(recipe: Recipe, tmp_path: Path) -> None:
    """The recipe's own image always runs mmdebstrap (so removing it takes the mirror's newer packages), a
    .deb kernel goes into mmdebstrap's install and leaves no base, and without a base nothing is read."""
    images, work = tmp_path / "images", tmp_path / "work"
    images.mkdir()
    work.mkdir()
    _a_root(work / "rootfs")
    bz = _with_bzimage(recipe, tmp_path, "6.12.0-a")
    assert not basetree.restore(bz, images, tmp_path / "none-yet")
    deb = replace(recipe, kernel=KernelInput("6.12.0-d", deb=tmp_path / "k.deb"))
    basetree.keep(deb, images, work / "rootfs", work)
    assert not basetree.applies(deb) and not (images / basetree.FOLDER).exists()
    basetree.keep(recipe, images, work / "rootfs", work)
    assert not basetree.restore(recipe, images, tmp_path / "own")
    assert not basetree.restore(deb, images, tmp_path / "deb")
    assert not (tmp_path / "own").exists() and not (tmp_path / "deb").exists()
    assert basetree.restore(bz, images, tmp_path / "bz")


@pytest.mark.parametrize("damage", ["symlink", "hard link", "folder"])
def test_a_base_that_is_not_a_file_of_its_own_is_refused_in_one_line(
        recipe: Recipe, tmp_path: Path, damage: str) -> None:
    images = tmp_path / "images"
    tar = basetree.path(recipe, images)
    tar.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.tar"
    elsewhere.write_bytes(b"")
    if damage == "symlink":
        tar.symlink_to(elsewhere)
    elif damage == "hard link":
        os.link(elsewhere, tar)
    else:
        tar.mkdir()
    with pytest.raises(HarnessError, match=r"is not a regular file of its own .*: not reading it") as exc:
        basetree.restore(_with_bzimage(recipe, tmp_path, "6.12.0-a"), images, tmp_path / "rootfs")
    assert "\n" not in exc.value.message and exc.value.hint
    assert not (tmp_path / "rootfs").exists()


def test_a_bases_folder_that_is_a_symlink_is_not_written_through(recipe: Recipe, tmp_path: Path) -> None:
    images, work, target = tmp_path / "images", tmp_path / "work", tmp_path / "target"
    images.mkdir()
    target.mkdir()
    (images / basetree.FOLDER).symlink_to(target)
    work.mkdir()
    _a_root(work / "rootfs")
    with pytest.raises(HarnessError, match=r"\.bases is not a folder: not writing a base tree there"):
        basetree.keep(recipe, images, work / "rootfs", work)
    assert list(target.iterdir()) == []
