"""The content hashes an image's key is made of (guest/recipe.py): a file's, and a folder tree's with
each entry's path, mode and content (a symlink by its target), so that a changed byte, a renamed file
or a lost executable bit each make another image."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(folder).as_posix()
        content = os.readlink(path) if path.is_symlink() else file_digest(path)
        h.update(f"{rel} {oct(path.lstat().st_mode)} {content}\n".encode())
    return h.hexdigest()
