"""The folder guest images are kept in (`--image-dir`, VMHARNESS_IMAGE_DIR, or /var/lib/vmharness/images):
`image build` owns it (vmharness/system/owned.py). It is made and marked by the first build; an existing one
must hold the marker, be empty, or hold nothing but what builds leave (a `.lock`, unfinished
`.build-*` folders, finished images named by their 16-hex-digit key: a folder from before markers).
Anything else, a folder under /proc, /sys or /dev, a symlink or a file there is refused in one line,
since a build removes the unfinished `.build-*` folders it finds, and writes its lock there."""

from __future__ import annotations

import re
from pathlib import Path

from vmharness import environ
from vmharness.system import owned

DEFAULT = "/var/lib/vmharness/images"
ENV = "VMHARNESS_IMAGE_DIR"
OWNER = "image build"
_KEY = re.compile(r"[0-9a-f]{16}")


def path(override: str | None = None) -> Path:
    return Path(override or environ.get(ENV) or DEFAULT)


def flag(override: str | None = None) -> str:
    """What named the folder, for errors: the flag, the environment variable, or the default."""
    return "--image-dir" if override else ENV if environ.get(ENV) else "the image folder"


def _legacy(_path: Path, entries: list[str]) -> bool:
    return all(e == ".lock" or e.startswith(".build-") or _KEY.fullmatch(e) for e in entries)


def claim(images: Path, named_by: str, force: bool = False) -> owned.Folder:
    """The image folder as `image build`'s, made if need be (refused if it is not: see above)."""
    return owned.claim(images, OWNER, named_by, force, _legacy,
                       "name a new or empty folder for images, or one image build made")
