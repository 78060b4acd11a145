"""Where `image build` puts a researcher's kernel in the image's root (guest/imagebuild.py
`_install_kernel`): never through a link that leads out of the root onto this host. The install itself,
depmod and mkinitramfs in a real root, is tests/integration/test_guest.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmharness.errors import HarnessError
from vmharness.guest import imagebuild
from vmharness.guest.kernelinput import KernelInput

RELEASE = "6.12.0-lab"


def _kernel(tmp_path: Path, modules: bool) -> KernelInput:
    bz = tmp_path / "bzImage"
    bz.write_bytes(b"the researcher's kernel")
    tree = tmp_path / "built" / RELEASE
    tree.mkdir(parents=True)
    (tree / "modules.order").write_text("")
    return KernelInput(RELEASE, kernel=bz, modules=tree if modules else None)


def test_a_lib_link_out_of_the_root_is_refused_and_the_hosts_modules_stay(tmp_path: Path) -> None:
    root, host = tmp_path / "root", tmp_path / "host"
    (root / "boot").mkdir(parents=True)
    (host / "lib/modules" / RELEASE).mkdir(parents=True)
    (host / "lib/modules" / RELEASE / "kept").write_text("the host's\n")
    (root / "lib").symlink_to(host / "lib")  # absolute: in a chroot it would be the root's, here it is the host's
    with pytest.raises(HarnessError, match=r"/lib/modules in the image's root leads outside it") as exc:
        imagebuild._install_kernel(_kernel(tmp_path, modules=True), root)
    assert "\n" not in exc.value.message and "relative" in exc.value.hint
    assert (host / "lib/modules" / RELEASE / "kept").read_text() == "the host's\n"
    assert sorted(p.name for p in (host / "lib/modules" / RELEASE).iterdir()) == ["kept"]


def test_a_boot_link_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root, host_boot = tmp_path / "root", tmp_path / "host-boot"
    root.mkdir()
    host_boot.mkdir()
    (root / "boot").symlink_to(host_boot)
    with pytest.raises(HarnessError, match=r"/boot in the image's root leads outside it"):
        imagebuild._install_kernel(_kernel(tmp_path, modules=False), root)
    assert list(host_boot.iterdir()) == []


def test_a_link_planted_at_the_kernels_name_is_replaced_not_written_through(tmp_path: Path) -> None:
    root, victim = tmp_path / "root", tmp_path / "host-file"
    (root / "boot").mkdir(parents=True)
    victim.write_text("the host's\n")
    (root / "boot" / f"vmlinuz-{RELEASE}").symlink_to(victim)
    imagebuild._install_kernel(_kernel(tmp_path, modules=False), root)
    assert victim.read_text() == "the host's\n"
    installed = root / "boot" / f"vmlinuz-{RELEASE}"
    assert not installed.is_symlink() and installed.read_bytes() == b"the researcher's kernel"
