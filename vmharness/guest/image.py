"""A guest image as `image build` leaves it: a folder holding disk.qcow2 (an ext4 root), the kernel and
initrd beside it for direct boot (and the vmlinux taken out of the kernel, booted through PVH), and
image.json, what the build recorded. Images live in the image folder (system/imagedir.py) under their
recipe's key (guest/recipe.py); guest/imagebuild.py renames a build into place only when complete, so
a folder with a key for its name is always a whole image."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmharness import userfile
from vmharness.errors import HarnessError
from vmharness.guest.recipe import Recipe

MAX_META = 1 << 20  # bytes: an image's image.json


@dataclass(frozen=True)
class Image:
    folder: Path
    meta: dict[str, Any]

    @property
    def disk(self) -> Path:
        return self.folder / "disk.qcow2"

    @property
    def kernel(self) -> Path:
        return self.folder / "vmlinuz"

    @property
    def boot_kernel(self) -> Path:
        """What a guest boots: the vmlinux taken out of vmlinuz at build (PVH entry, no decompression
        in the guest), or vmlinuz itself."""
        vmlinux = self.folder / "vmlinux"
        return vmlinux if vmlinux.exists() else self.kernel

    @property
    def initrd(self) -> Path | None:
        path = self.folder / "initrd.img"
        return path if path.exists() else None

    @property
    def cmdline(self) -> str:
        return str(self.meta["cmdline"])


def load_image(folder: Path) -> Image:
    hint = "build one with: vmharness image build"
    text = userfile.text(folder / "image.json", MAX_META, hint,
                         lambda what: HarnessError(f"no image in {folder}: its image.json {what}", hint))
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HarnessError(f"no image in {folder}: its image.json is not JSON", hint) from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("cmdline", ""), str):
        raise HarnessError(f"no image in {folder}: its image.json is not what image build writes", hint)
    image = Image(folder, meta)
    if not image.disk.exists() or not image.kernel.exists():
        raise HarnessError(f"image {folder} is incomplete", "rebuild it: vmharness image build")
    return image


def find(recipe: Recipe, images: Path) -> Image | None:
    folder = images / recipe.key()
    return load_image(folder) if (folder / "image.json").exists() else None
