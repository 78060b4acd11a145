"""kexec-tools for the rig's L1, where the harness's host boots reboot L1 for real: Debian's package
and the Xen libraries its `kexec` links against, fetched with `apt-get download` and unpacked into
the cache, never installed on this machine (installed, kexec-tools hooks the machine's own reboots).
L1's init puts a `/usr/sbin/kexec` into its view of L0's root that runs this one (l1-init.sh)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tests.rig.paths import cache_lock
from vmharness.errors import HarnessError
from vmharness.system.proc import run

PACKAGE = "kexec-tools"
_DONE = ".version"  # written last: without it, a tree is unfinished
LIBS = "usr/lib/x86_64-linux-gnu"
PROGRAM = "sbin/kexec"


def obtain() -> Path:
    """The unpacked tree (`sbin/kexec`, and the libraries under LIBS) of the kexec-tools apt offers,
    fetched unless it is cached."""
    with cache_lock() as cache:
        store = cache / "kexec-tools"
        store.mkdir(exist_ok=True)
        version = _version(PACKAGE)
        tree = store / version.replace(":", "_")
        if (tree / _DONE).is_file():
            return tree
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=store))
        try:
            debs = staging / "debs"
            debs.mkdir()
            run(["apt-get", "download", "-o", "APT::Sandbox::User=root", *_packages()], timeout=900, cwd=debs)
            for deb in sorted(debs.glob("*.deb")):
                run(["dpkg-deb", "-x", deb, staging / "root"], timeout=300)
            shutil.rmtree(debs)
            _runs(staging / "root")
            (staging / "root" / _DONE).write_text(version + "\n")
            (staging / "root").rename(tree)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return tree


def env(tree: Path) -> dict[str, str]:
    """What `kexec` from `tree` needs to find its libraries."""
    return {"LD_LIBRARY_PATH": str(tree / LIBS)}


def _packages() -> list[str]:
    """kexec-tools and, transitively, the Xen libraries it depends on (only those: the rest are L0's)."""
    found, todo = [PACKAGE], [PACKAGE]
    while todo:
        deps = run(["apt-cache", "depends", todo.pop()], timeout=60).stdout
        for line in deps.splitlines():
            kind, _, name = line.strip().lstrip("|").partition(": ")
            if kind == "Depends" and name.startswith("libxen") and name not in found:
                found.append(name)
                todo.append(name)
    return found


def _version(package: str) -> str:
    """The version apt would fetch, after one `apt-get update` where its lists offer none (as for the kernel)."""
    for attempt in range(2):
        for line in run(["apt-cache", "policy", package], timeout=60).stdout.splitlines():
            key, _, value = line.strip().partition(": ")
            if key == "Candidate" and value and value != "(none)":
                return value
        if attempt == 0:
            run(["apt-get", "update"], timeout=600)
    raise HarnessError(f"apt offers no {package}", "check /etc/apt/sources.list for a bookworm main entry")


def _runs(tree: Path) -> None:
    """`kexec --version` runs with the unpacked libraries (nothing else: it loads no kernel)."""
    res = run([str(tree / PROGRAM), "--version"], timeout=30, check=False, env={**os.environ, **env(tree)})
    if not res.ok or "kexec-tools" not in res.stdout + res.stderr:
        raise HarnessError(f"the unpacked kexec does not run: {(res.stderr or res.stdout).strip()[:200]}",
                           "a library it links against is missing from the packages fetched")
