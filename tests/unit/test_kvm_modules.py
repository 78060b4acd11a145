"""`kvm_modules`, an instance's own KVM modules, on a synthetic tree whose modprobe, insmod, rmmod and
modinfo act on it as the kernel and kmod would (as tests/unit/test_reload.py's do): each file checked
(kmod's name, a vermagic of the running kernel, refused with both strings otherwise), loaded in place
of the stock module by the reload the load-time knobs use (journaled first, with the files' path,
sha256 and srcversion; the srcversion read back), refused while a guest holds KVM, and the stock
modules loaded again by modprobe after the guest, after a failure, and by host-restore after a SIGKILL.
The hostile values through the real command: test_hostile_kvm_modules.py; the real modules in the
rig's L1: tests/integration/test_kvm_rig.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests import qemu_kit
from tests.fakehost import FakeHost
from tests.unit.test_reload import OWNER, Modules, _read, _tree
from vmharness.analysis import variants
from vmharness.errors import HarnessError
from vmharness.experiment import boots
from vmharness.host.inspect import kvm_module
from vmharness.host.prepare import knobs
from vmharness.journal import journal, restore
from vmharness.model import config
from vmharness.system import proc
from vmharness.system.root import HostRoot

RELEASE = os.uname().release
STOCK = {"kvm": "0A0A0A0A0A0A0A0A0A0A0A0", "kvm_amd": "0B0B0B0B0B0B0B0B0B0B0B0"}
PATCHED = "C0FFEE0000000000000000C"


class Kmod(Modules):
    """Modules (test_reload.py) with insmod FILE, /sys/module/NAME/srcversion and modinfo on files:
    `files` maps a file to its (name, vermagic, srcversion); `loads_as` a file to the srcversion the
    kernel shows once it is loaded, where that is not modinfo's; `fail` = "insmod": insmod fails."""

    def __init__(self, base: Path) -> None:
        self.files: dict[str, tuple[str, str, str]] = {}
        self.loads_as: dict[str, str] = {}
        self.srcversion = dict(STOCK)
        super().__init__(base)

    def load(self, module: str, args: dict[str, str]) -> None:
        super().load(module, args)
        (self.base / "sys/module" / module / "srcversion").write_text(self.srcversion[module] + "\n")

    def run(self, argv: list[str], **kw: Any) -> proc.Result:
        if argv[0] == "modinfo":  # modinfo -F FIELD -- FILE
            name, vermagic, src = self.files[argv[4]]
            return proc.Result(tuple(argv), 0, {"name": name, "vermagic": vermagic, "srcversion": src}[argv[2]] + "\n",
                               "")
        if argv[0] == "insmod":
            self.calls.append(" ".join(argv))
            name, _v, src = self.files[argv[2]]
            if self.fail == "insmod":
                return proc.Result(tuple(argv), 1, "", "insmod: ERROR: could not insert module: Invalid parameters")
            self.srcversion[name] = self.loads_as.get(argv[2], src)
            self.load(name, dict(a.split("=", 1) for a in argv[3:]))
            self.srcversion[name] = STOCK[name]  # what modprobe loads next time
            return proc.Result(tuple(argv), 0, "", "")
        return super().run(argv, **kw)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeHost, Kmod, HostRoot]:
    h = FakeHost(tmp_path / "root", nodes=1, cpus_per_node=2)
    mods = Kmod(h.base)
    monkeypatch.setattr(proc, "run", mods.run)
    return h, mods, HostRoot(h.base, allow_writes=True)


def _module(mods: Kmod, name: str = "kvm_amd", vermagic: str = f"{RELEASE} SMP preempt mod_unload modversions",
            src: str = PATCHED, folder: str = "mods") -> str:
    """A module file in a folder only root can write, known to the fake modinfo."""
    path = qemu_kit.trusted(folder) / f"{name.replace('_', '-')}.ko"
    path.write_bytes(b"\x7fELF " + name.encode())
    path.chmod(0o644)
    mods.files[str(path)] = (name, vermagic, src)
    return str(path)


def test_the_key_is_read_from_an_instance_and_is_a_guests_setting(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[[instance]]\nname = "a"\nkvm_modules = ["/root/kvm/kvm.ko", "/root/kvm/kvm-amd.ko"]\n')
    assert config.load_run(path).instance[0].kvm_modules == ("/root/kvm/kvm.ko", "/root/kvm/kvm-amd.ko")
    with pytest.raises(HarnessError, match="instance a: kvm_modules is a guest's setting"):
        config.load(path)


def test_a_module_file_is_checked_and_recorded_by_path_sha256_and_srcversion(host: Any) -> None:
    _h, mods, _root = host
    path = _module(mods)
    [m] = kvm_module.check_all((path,), "config.instance[0].kvm_modules")
    assert m.to_json() == {"path": path, "real": path, "name": "kvm_amd", "vermagic": mods.files[path][1],
                           "srcversion": PATCHED, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def test_a_module_for_another_kernel_is_refused_with_both_strings(host: Any) -> None:
    _h, mods, root = host
    path = _module(mods, vermagic="5.10.0-99-amd64 SMP mod_unload modversions")
    before = _tree(root.base)
    with pytest.raises(HarnessError) as err:
        knobs.apply(root, "b", {}, OWNER, print, (path,))
    assert err.value.message == (f"instance b: kvm_modules[0] {path}: was built for another kernel: its vermagic is "
                                 f"'5.10.0-99-amd64 SMP mod_unload modversions', and the running kernel is "
                                 f"{RELEASE!r}")
    assert mods.calls == [] and _tree(root.base) == before


@pytest.mark.parametrize("names, why", [
    (("nvme",), "is the module 'nvme', not one of kvm, kvm_amd, kvm_intel"),
    (("kvm_amd", "kvm_amd"), "names two files of the module kvm_amd"),
    (("kvm_amd", "kvm_intel"), "names both kvm_amd and kvm_intel"),
])
def test_a_file_of_another_module_or_one_module_twice_is_refused(host: Any, names: tuple[str, ...], why: str) -> None:
    _h, mods, _root = host
    paths = tuple(_module(mods, n, folder=f"mods{i}") for i, n in enumerate(names))
    with pytest.raises(HarnessError, match=why):
        kvm_module.check_all(paths, "config.instance[0].kvm_modules")


def test_the_vendor_module_is_loaded_from_its_file_journaled_first_and_the_stock_one_given_back(host: Any) -> None:
    h, mods, root = host
    mods.load("kvm_amd", {"nested": "0"})  # loaded by hand with an option: it is passed to the file's too
    path = _module(mods)
    before = _tree(h.base)
    applied = knobs.apply(root, "b", {}, OWNER, print, (path,))
    assert mods.calls == ["rmmod -- kvm_amd", f"insmod -- {path} nested=0 npt=Y"]
    assert _read(h, "kvm_amd", "nested") == "0" and h.p("sys/module/kvm_amd/srcversion").read_text().strip() == PATCHED
    [rec] = journal.read(root)
    assert rec["modules"] == [{"name": "kvm_amd", "load": {"nested": "0", "npt": "Y"}, "runtime": {},
                               "srcversion": STOCK["kvm_amd"]}]
    assert rec["files"] == [{"name": "kvm_amd", "path": path, "sha256": applied.report["kvm_modules"][0]["sha256"],
                             "srcversion": PATCHED}]
    assert applied.report["kvm_modules"][0]["reads"] == PATCHED
    assert knobs.give_back(root, applied, print) == []
    assert mods.calls[2:] == ["rmmod -- kvm_amd", "modprobe -- kvm_amd nested=0 npt=Y"]
    assert _tree(h.base) == before and not h.p(journal.JOURNAL).exists()


def test_kvm_and_its_vendor_module_load_from_files_kvm_first_with_a_load_time_knob(host: Any) -> None:
    h, mods, root = host
    kvm, amd = _module(mods, "kvm", src="0C0C", folder="mods-kvm"), _module(mods)
    before = _tree(h.base)
    applied = knobs.apply(root, "b", {"kvm_amd.npt": "N"}, OWNER, print, (amd, kvm))
    assert mods.calls[:2] == ["rmmod -- kvm_amd", "rmmod -- kvm"]
    assert mods.calls[2].startswith(f"insmod -- {kvm} ") and mods.calls[3] == f"insmod -- {amd} nested=1 npt=N"
    assert _read(h, "kvm_amd", "npt") == "N" and applied.report["kvm_amd.npt"]["reads"] == "N"
    assert knobs.give_back(root, applied, print) == []
    assert _tree(h.base) == before


def test_a_module_a_guest_holds_is_refused_and_nothing_is_touched(host: Any) -> None:
    h, mods, root = host
    path = _module(mods)
    h.p("sys/module/kvm_amd/refcnt").write_text("2\n")
    before = _tree(h.base)
    with pytest.raises(HarnessError, match=r"instance b: kvm_modules: the stock modules must be unloaded, and "
                       r"kvm_amd is in use \(refcnt 2\)"):
        knobs.apply(root, "b", {}, OWNER, print, (path,))
    assert mods.calls == [] and _tree(h.base) == before and not h.p(journal.JOURNAL).exists()


@pytest.mark.parametrize("fault", ["insmod fails", "srcversion differs"])
def test_a_file_that_does_not_load_as_itself_gives_the_stock_module_back(host: Any, fault: str) -> None:
    h, mods, root = host
    path = _module(mods)
    before = _tree(h.base)
    if fault == "insmod fails":
        mods.fail, match = "insmod", f"insmod {path} nested=1 npt=Y failed: insmod: ERROR"
    else:
        mods.loads_as[path] = "D1FFE2E2E2E2E2E2E2E2E2E"
        match = f"/sys/module/kvm_amd/srcversion reads 'D1FFE2E2E2E2E2E2E2E2E2E', not its srcversion {PATCHED}"
    with pytest.raises(HarnessError, match=match):
        knobs.apply(root, "b", {}, OWNER, print, (path,))
    assert _tree(h.base) == before and not h.p(journal.JOURNAL).exists()  # the stock module, by modprobe
    assert mods.calls[-1] == "modprobe -- kvm_amd nested=1 npt=Y"


def test_a_sigkill_after_the_load_then_host_restore_loads_the_stock_module(host: Any) -> None:
    """The process died with the file's module loaded (its record left): host-restore reloads the stock
    one, even when the file was a copy of it (the same srcversion)."""
    h, mods, root = host
    path = _module(mods, src=STOCK["kvm_amd"])
    before = _tree(h.base)
    knobs.apply(root, "b", {}, OWNER, print, (path,))  # no give_back: as after a SIGKILL
    assert journal.read(root)[0]["files"][0]["path"] == path
    assert restore.undo(root, print) == []
    assert mods.calls[-2:] == ["rmmod -- kvm_amd", "modprobe -- kvm_amd nested=1 npt=Y"]
    assert _tree(h.base) == before and not h.p(journal.JOURNAL).exists()


@pytest.mark.parametrize("files", [
    [{"name": "kvm_amd", "path": "/root/kvm-amd.ko\n", "sha256": "0" * 64, "srcversion": ""}],
    [{"name": "nvme", "path": "/root/kvm-amd.ko", "sha256": "0" * 64, "srcversion": ""}],
    [{"name": "kvm_amd", "path": "/root/kvm-amd.ko", "sha256": "x", "srcversion": ""}],
    [{"name": "kvm_amd", "path": "/root/kvm-amd.ko", "sha256": "0" * 64, "srcversion": "$(reboot)"}],
    "/root/kvm-amd.ko",
])
def test_a_damaged_files_record_is_not_undone(host: Any, files: object) -> None:
    h, mods, root = host
    journal.record(root, {"op": "reload", "modules": [{"name": "kvm_amd", "load": {"npt": "Y", "nested": "1"},
                                                       "runtime": {}}]}, OWNER)
    rec = json.loads(h.p(journal.JOURNAL).read_text())
    h.p(journal.JOURNAL).write_text(json.dumps({**rec, "files": files}) + "\n")
    with pytest.raises(HarnessError, match="is a 'reload' record whose files is"):
        restore.undo(root, print)
    assert mods.calls == []


def test_the_preview_names_each_file_and_loads_nothing(host: Any) -> None:
    _h, mods, root = host
    path = _module(mods)
    line = knobs.preview(root, "b", {}, (path,))
    assert line.startswith(f"host knobs of b, set before its guest boots and given back after it: kvm_modules {path} "
                           f"as kvm_amd (vermagic {RELEASE}, sha256 ")
    assert mods.calls == []


def test_instances_that_differ_in_their_modules_boot_apart_and_the_variant_check_names_them(tmp_path: Path) -> None:
    """Never one guest for both (the modules are loaded before a boot), and the difference is one the
    configuration asked for, shown as such."""
    path = tmp_path / "r.toml"
    path.write_text('[[instance]]\nname = "stock"\n[[instance]]\nname = "patched"\nvcpu_cap = 50\n'
                    'kvm_modules = ["/root/kvm/kvm-amd.ko"]\n')
    cfg = config.load_run(path)
    assert boots.rides(cfg) == {}
    d = variants.diff({}, {}, {"kvm_modules": []}, {"kvm_modules": ["/root/kvm/kvm-amd.ko"]}, "patched")
    assert d.lines == ("kvm_modules: [] -> ['/root/kvm/kvm-amd.ko']",) and d.asked


def test_host_prepare_dry_run_shows_an_instances_modules_and_loads_nothing(host: Any, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from vmharness.cli import main as cli
    h, mods, _root = host
    path = _module(mods)
    study = tmp_path / "r.toml"
    study.write_text(f'[[instance]]\nname = "a"\n[[instance]]\nname = "b"\nkvm_modules = ["{path}"]\n')
    before = _tree(h.base)
    assert cli.main(["host-prepare", "--dry-run", "--hugepages", "64M", "--host-root", str(h.base),
                     "--config", str(study)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        f"host knobs of b, set before its guest boots and given back after it: kvm_modules {path} as kvm_amd")
    assert mods.calls == [] and _tree(h.base) == before
