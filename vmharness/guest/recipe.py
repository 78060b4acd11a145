"""The recipe an image is built from (vmharness/data/images/, or `image build --recipe DIR`): the Debian
suite, mirror and packages of recipe.toml, the hook and overlay beside it, and the researcher's kernel
if one was given. Its key hashes everything that goes into an image (every file of the recipe folder,
the mirror, the kernel and the builder's version), so that images kept under their key
(guest/image.py) are rebuilt exactly when something changed."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from vmharness import data
from vmharness.errors import HarnessError
from vmharness.guest.digest import file_digest
from vmharness.guest.kernelinput import KernelInput
from vmharness.model import tomlfile

BUILDER_VERSION = "2"  # bump when guest/imagebuild.py's steps change what an image contains


@dataclass(frozen=True)
class Recipe:
    folder: Path
    suite: str
    mirror: str
    variant: str
    packages: tuple[str, ...]
    cmdline: str
    free_mib: int
    kernel: KernelInput | None = None
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256

    def key(self) -> str:
        """The image's: the base's inputs and the researcher's kernel."""
        return self._hash(with_kernel=True)

    def base_key(self) -> str:
        """The base tree's (guest/basetree.py): what mmdebstrap and the recipe's hook are given."""
        return self._hash(with_kernel=False)

    def _hash(self, with_kernel: bool) -> str:
        h = hashlib.sha256(f"builder {BUILDER_VERSION}\nmirror {self.mirror}\n".encode())
        for rel, digest in sorted(self.files.items()):
            h.update(f"{rel} {digest}\n".encode())
        if with_kernel and self.kernel:
            h.update(f"kernel {self.kernel.digest()}\n".encode())
        return h.hexdigest()[:16]


def host_mirror(suite: str, sources: Path = Path("/etc/apt")) -> str:
    """The first http(s) mirror the host's apt uses for `suite`, else deb.debian.org."""
    texts = []
    for path in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]:
        if path.is_file():
            texts.append(path.read_text(errors="replace"))
    text = "\n".join(texts)
    for uri, suites in re.findall(r"^URIs:\s*(\S+).*?^Suites:\s*([^\n]+)", text, re.M | re.S):
        if suite in suites.split() and uri.startswith("http"):
            return str(uri)
    for uri, line_suite in re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
        if line_suite == suite and uri.startswith("http"):
            return str(uri)
    return "http://deb.debian.org/debian"


def load_recipe(folder: Path = data.IMAGE_RECIPE, kernel: KernelInput | None = None) -> Recipe:
    path = folder / "recipe.toml"
    settings = tomlfile.read(path, HarnessError(f"no image recipe at {path}",
                                                "pass --recipe DIR, a folder with recipe.toml"))
    want = {"suite": str, "mirror": str, "variant": str, "packages": list, "cmdline": str, "free_mib": int}
    for name, kind in want.items():
        if not isinstance(settings.get(name), kind):
            raise HarnessError(f"{path}: {name} must be a {kind.__name__}", f"see {data.IMAGE_RECIPE}/recipe.toml")
    unknown = sorted(set(settings) - set(want))
    if unknown:
        raise HarnessError(f"{path}: unknown setting {unknown[0]}", "known: " + ", ".join(want))
    if not (folder / "hooks" / "customize.sh").is_file():
        raise HarnessError(f"{folder} has no hooks/customize.sh", f"copy it from {data.IMAGE_RECIPE}")
    files = {p.relative_to(folder).as_posix(): file_digest(p)
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "README.md"}
    return Recipe(folder.resolve(), settings["suite"], settings["mirror"] or host_mirror(settings["suite"]),
                  settings["variant"], tuple(settings["packages"]), settings["cmdline"], settings["free_mib"], kernel,
                  files)
