"""The writer of a snapshot's tarball: files of a host root copied into a tar laid out like `/`.

Symlinks are stored as the kernel wrote them (relative), so `--host-root` on the unpacked tree
resolves them inside it, and `follow` records every link on the way to a path. Only regular files
are read (an attribute some device refuses, or one that is write-only, is skipped); what is not a
regular file there (a FIFO, a device node where an attribute should be) is left out, never opened:
opening one can block or act on a device. Every member has the same owner, mode and time, so two
snapshots of one host are equal byte for byte.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile

from vmharness.errors import HarnessError
from vmharness.system.root import LARGE_READ, HostRoot
from vmharness.userfile import read_file


class Writer:
    def __init__(self, root: HostRoot, tar: tarfile.TarFile) -> None:
        self.root = root
        self.tar = tar
        self.seen: set[str] = set()

    def _info(self, path: str, kind: bytes) -> tarfile.TarInfo | None:
        name = path.lstrip("/")
        if not name or name in self.seen:
            return None
        parent = os.path.dirname(name)
        if parent:
            self.dir("/" + parent)
        self.seen.add(name)
        info = tarfile.TarInfo(name)
        info.type, info.mtime, info.mode = kind, 0, 0o755 if kind == tarfile.DIRTYPE else 0o644
        return info

    def dir(self, path: str) -> None:
        info = self._info(path, tarfile.DIRTYPE)
        if info is not None:
            self.tar.addfile(info)

    def data(self, path: str, content: bytes, mode: int = 0o644) -> None:
        info = self._info(path, tarfile.REGTYPE)
        if info is not None:
            info.size, info.mode = len(content), mode
            self.tar.addfile(info, io.BytesIO(content))

    def file(self, path: str, readable: int = 0o444, keep_mode: bool = False) -> None:
        """Copy a regular file if it exists and can be read (by someone in `readable`: 0o004 for what
        any user may read); sysfs attributes some devices refuse, and anything that is not a regular
        file, are skipped."""
        real = self.root.path(path)
        try:
            mode = os.stat(real).st_mode
        except OSError:
            return
        if not stat.S_ISREG(mode) or not mode & readable:  # write-only attributes have no content
            return
        self.root.realpath(path)  # refused if it leads out of the root
        try:
            content = read_file(real, path, LARGE_READ)
        except PermissionError as exc:
            raise HarnessError(f"no permission to read {path}", "run host-snapshot as root") from exc
        except HarnessError:  # it changed into something else since the stat: leave it out
            return
        except OSError:
            return
        self.data(path, content, stat.S_IMODE(mode) & 0o644 if keep_mode else 0o644)

    def link(self, path: str) -> None:
        real = self.root.path(path)
        if not real.is_symlink():
            return
        info = self._info(path, tarfile.SYMTYPE)
        if info is not None:
            info.linkname = os.readlink(real)
            self.tar.addfile(info)

    def follow(self, path: str) -> str | None:
        """Record every symlink on the way to `path` (each as the kernel wrote it) and the directories
        they lead to; returns the host path it resolves to, or None if it does not exist."""
        self.root.realpath(path)  # refused if it leads out of the root
        done, todo, hops = "/", [p for p in path.split("/") if p], 0
        while todo:
            part = todo.pop(0)
            if part in (".", ".."):
                done = os.path.dirname(done) if part == ".." else done
                continue
            here = os.path.join(done, part)
            real = self.root.path(here)
            if real.is_symlink():
                hops += 1
                if hops > 40:  # a loop; the kernel gives up at 40 too
                    return None
                self.link(here)
                target = os.readlink(real)
                done = "/" if target.startswith("/") else done
                todo = [p for p in target.split("/") if p] + todo
                continue
            if not os.path.lexists(real):
                return None
            done = here
        if self.root.is_dir(done):
            self.dir(done)
        return done

    def files_in(self, path: str, readable: int = 0o444) -> None:
        """Every regular file directly in a directory (not its subdirectories)."""
        real = self.follow(path)
        if real is not None:
            for name in self.root.listdir(real):
                self.file(f"{real}/{name}", readable)

    def real_dir(self, path: str) -> str:
        """Record the directory a symlink points to, and return its host path."""
        target = self.root.realpath(path)
        self.dir(target)
        return target
