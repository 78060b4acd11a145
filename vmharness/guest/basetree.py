"""A recipe's base tree, kept in the image folder as `.bases/BASE_KEY.tar`: the root mmdebstrap made and
the recipe's hook customized, before a researcher's kernel went in. An image of the same recipe with
another bzImage starts from it instead of running mmdebstrap again, much as mkosi's incremental mode
keeps its image once the packages are in: in a study of several kernels each image then costs
the kernel's own steps (depmod, mkinitramfs, mkfs, qcow2) and no longer mmdebstrap's minutes.

It is keyed like images (guest/recipe.py `base_key`: the recipe's files, its mirror, the builder's
version), so it is used exactly when mmdebstrap would be given the same inputs. The recipe's own
image (no kernel of the researcher's) always runs mmdebstrap and keeps its root as the base, so the
base is that image's root. A .deb kernel goes into mmdebstrap's own install, so its builds neither use nor leave a base.
GNU tar keeps what the root holds: owners by number, modes, device nodes, hard links, ACLs and
extended attributes (file capabilities among them)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.guest.recipe import Recipe
from vmharness.system import proc

FOLDER = ".bases"
_TAR = ("tar", "--numeric-owner", "--acls", "--xattrs", "--xattrs-include=*")


def applies(recipe: Recipe) -> bool:
    """Whether a build of `recipe` leaves a base tree: not with a .deb kernel."""
    return recipe.kernel is None or recipe.kernel.deb is None


def path(recipe: Recipe, images: Path) -> Path:
    return images / FOLDER / f"{recipe.base_key()}.tar"


def _kept(tar: Path) -> bool:
    """Whether a base is kept at `tar`; one that is not a regular file of a single link is refused."""
    try:
        st = os.lstat(tar)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        raise HarnessError(f"image build: {tar} is not a regular file of its own (a link, or a folder): not reading it",
                           "remove it; the next build writes the base again")
    return True


def restore(recipe: Recipe, images: Path, rootfs: Path) -> bool:
    """Unpack the recipe's kept base into `rootfs` (made here, and not there before) for a build with a
    researcher's bzImage; False for any other build, or where no base is kept. An image without a
    kernel of the researcher's is always built by mmdebstrap, and its base replaces the kept one: to
    take the mirror's newer packages, remove the recipe's image and build it again."""
    tar = path(recipe, images)
    if recipe.kernel is None or recipe.kernel.kernel is None or not _kept(tar):
        return False
    rootfs.mkdir()
    proc.run([*_TAR, "--extract", "--same-permissions", "--file", str(tar), "--directory", str(rootfs)],
             timeout=1800)
    return True


def keep(recipe: Recipe, images: Path, rootfs: Path, work: Path) -> None:
    """Write `rootfs` as the recipe's base: into the build's folder `work` first (removed with it if the
    build dies), then renamed into `.bases`, so that a base there is always whole."""
    if not applies(recipe):
        return
    folder = images / FOLDER
    try:
        folder.mkdir(mode=0o755)
    except FileExistsError:
        if folder.is_symlink() or not folder.is_dir():
            raise HarnessError(f"image build: {folder} is not a folder: not writing a base tree there",
                               "remove it; the next build makes it") from None
    part = work / "base.tar"
    proc.run([*_TAR, "--create", "--one-file-system", "--file", str(part), "--directory", str(rootfs), "."],
             timeout=1800)
    part.rename(path(recipe, images))
