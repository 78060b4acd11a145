"""KVM for real, inside the rig's L1 (TCG with -cpu max shows svm, npt and vgif): kvm_amd loads, the
probe finds KVM usable there (where before, without KVM_SET_CPUID2, its tiny guest triple-faulted), and
KVM's module parameters behave as the host knobs of issue 26 expect. kvm and kvm_amd are unloaded again
afterwards: the other rig tests expect an L1 without /dev/kvm."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from contextlib import ExitStack, closing

import pytest

from tests.integration.conftest import ONCE_MORE_IF_WEDGED
from tests.rig import Rig, commands
from tests.rig.session import SessionRig

pytestmark = [pytest.mark.integration, pytest.mark.vm, ONCE_MORE_IF_WEDGED]

PARAMS = "/sys/module/{module}/parameters/{name}"
IMAGES = "/tmp/kvm-probe-images"  # in L1's own /tmp: one "image" holding the rig's kernel


def sh(rig: Rig, script: str, timeout: float = 120) -> str:
    return rig.run(["sh", "-c", script], timeout=timeout, check=True).stdout


class KvmL1:
    """The session's L1 with KVM loaded, for the module's tests; a fresh L1, KVM loaded in it, where the one
    before wedged (stopped), so that the test it wedged in can go once more (ONCE_MORE_IF_WEDGED) and the
    tests after it are not lost with it: this module's guests run under KVM in L1, where L1 has wedged."""

    def __init__(self, session_rig: SessionRig) -> None:
        self._session = session_rig
        self._loaded = ExitStack()  # Rig.kvm of the L1 in use
        self._rig: Rig | None = None

    def rig(self) -> Rig:
        if self._rig is None or not self._rig.usable:
            self._loaded.pop_all()  # a wedged L1 was stopped with its modules: nothing to unload
            self._rig = self._session.usable()
            self._loaded.enter_context(self._rig.kvm())
        return self._rig

    def close(self) -> None:
        if self._rig is not None and self._rig.usable:
            self._loaded.close()


@pytest.fixture(scope="module")
def kvm_l1s(session_rig: SessionRig) -> Iterator[KvmL1]:
    with closing(KvmL1(session_rig)) as held:
        yield held


@pytest.fixture
def kvm_in_l1(kvm_l1s: KvmL1) -> Rig:
    return kvm_l1s.rig()


def test_kvm_amd_loads_with_nested_paging(kvm_in_l1: Rig) -> None:
    assert sh(kvm_in_l1, f"cat {PARAMS.format(module='kvm_amd', name='npt')}").strip() == "Y"
    assert "Nested Paging enabled" in sh(kvm_in_l1, "dmesg | grep -i 'nested paging'")


def _rig_image(rig: Rig) -> None:
    """An image folder in L1 whose kernel is the rig's (the probe boots the newest image's kernel)."""
    kernel = shlex.quote(str(rig.kernel.boot_image))
    sh(rig, f"test -f {IMAGES}/rig/vmlinux || {{ mkdir -p {IMAGES}/rig && cp {kernel} {IMAGES}/rig/vmlinux"
            f" && echo '{{}}' > {IMAGES}/rig/image.json; }}")


def test_host_check_finds_kvm_usable_in_l1(kvm_in_l1: Rig) -> None:
    """The probe boots the rig's own kernel (a standard Debian kernel) under KVM in L1, with TCG beside
    it as the yardstick: everything in L1 is emulated, so both take seconds, and KVM wins."""
    _rig_image(kvm_in_l1)
    res = commands.vmharness(kvm_in_l1, "host-check", "--json", timeout=900, env={"VMHARNESS_IMAGE_DIR": IMAGES})
    rows = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert rows["/dev/kvm"]["status"] == "PASS"
    usable = rows["KVM usable"]
    assert usable["status"] == "PASS", usable
    assert "the image rig's kernel" in usable["detail"] and "booted under KVM with -cpu host" in usable["detail"]


def test_auto_chooses_kvm_for_a_guest_in_l1(kvm_in_l1: Rig) -> None:
    _rig_image(kvm_in_l1)
    res = commands.vmharness(kvm_in_l1, "vm", "up", "--print-xml", timeout=900, env={"VMHARNESS_IMAGE_DIR": IMAGES})
    assert res.ok, res.stderr
    assert "note: accelerator: KVM (the image rig's kernel" in res.stderr
    assert "type=\"kvm\"" in res.stdout and "host-passthrough" in res.stdout


@pytest.mark.parametrize(("name", "value", "reads"), [
    ("nx_huge_pages", "force", "Y"),
    ("nx_huge_pages", "off", "N"),
    ("nx_huge_pages", "auto", "N"),  # auto: on only where the CPU has iTLB multihit (L1's has not)
    ("nx_huge_pages_recovery_ratio", "30", "30"),
    ("nx_huge_pages_recovery_period_ms", "1000", "1000"),
    ("halt_poll_ns", "0", "0"),
])
def test_kvm_parameters_writable_at_run_time(kvm_in_l1: Rig, name: str, value: str, reads: str) -> None:
    path = PARAMS.format(module="kvm", name=name)
    out = sh(kvm_in_l1, f"old=$(cat {path}); echo {value} > {path}; cat {path}; echo $old > {path} || echo N > {path}")
    assert out.strip() == reads


@pytest.mark.parametrize(("module", "name"), [("kvm", "mitigate_smt_rsb"), ("kvm_amd", "nested"),
                                              ("kvm_amd", "npt"), ("kvm_amd", "avic")])
def test_kvm_parameters_set_only_at_load(kvm_in_l1: Rig, module: str, name: str) -> None:
    path = PARAMS.format(module=module, name=name)
    res = kvm_in_l1.run(["sh", "-c", f"ls -l {path} && echo 1 > {path}"], timeout=60)
    assert res.stdout.startswith("-r--r--r--") and not res.ok, res.stdout + res.stderr


def test_kvm_amd_reloaded_with_nested_off_takes_it(kvm_in_l1: Rig) -> None:
    nested = PARAMS.format(module="kvm_amd", name="nested")
    out = sh(kvm_in_l1, f"rmmod kvm_amd && modprobe kvm_amd nested=0 && cat {nested};"
                        f" rmmod kvm_amd && modprobe kvm_amd && cat {nested}")
    assert out.split() == ["0", "1"]


_KNOBS = """
import json, os, sys
from vmharness.host.prepare import knobs
from vmharness.system.root import HostRoot
a = knobs.apply(HostRoot("/"), "b", {"kvm.nx_huge_pages": "force", "kvm.nx_huge_pages_recovery_ratio": 30,
                                     "kvm_amd.npt": "N"}, "run:rig-knobs", lambda line: None)
print(json.dumps(a.report), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), 9)
print(knobs.give_back(HostRoot("/"), a, lambda line: None))
"""


@pytest.mark.parametrize("ending", ["give-back", "kill"])
def test_host_knobs_are_set_read_back_and_given_back_in_l1(kvm_in_l1: Rig, ending: str) -> None:
    """The harness's own code on a real KVM: the knobs set and read back (force reads Y; npt, read only at
    load, by reloading kvm_amd), then given back by the run, or, after a SIGKILL, by host-restore; the
    parameters read as before either way."""
    paths = " ".join([*(PARAMS.format(module="kvm", name=n) for n in ("nx_huge_pages", "nx_huge_pages_recovery_ratio")),
                      PARAMS.format(module="kvm_amd", name="npt")])
    before = sh(kvm_in_l1, f"cat {paths}").split()
    assert before[2] == "Y"
    env = {"PYTHONPATH": str(kvm_in_l1.repo)}
    res = kvm_in_l1.run([str(kvm_in_l1.repo / ".venv/bin/python"), "-c", _KNOBS, ending], timeout=300, env=env)
    report = json.loads(res.stdout.splitlines()[0])
    assert report["kvm.nx_huge_pages"] == {"before": before[0], "set": "force", "reads": "Y"}, res.stderr
    assert report["kvm.nx_huge_pages_recovery_ratio"]["reads"] == "30"
    assert report["kvm_amd.npt"] == {"before": "Y", "set": "N", "reads": "N", "reloaded": True}
    if ending == "kill":
        assert sh(kvm_in_l1, f"cat {paths}").split() == ["Y", "30", "N"]  # left set, and journaled
        restore = commands.vmharness(kvm_in_l1, "host-restore", timeout=300)
        assert restore.ok and "nx_huge_pages back to" in restore.stdout + restore.stderr, restore.stderr
    else:
        assert res.stdout.splitlines()[1] == "[]", res.stdout + res.stderr
    assert sh(kvm_in_l1, f"cat {paths}").split() == before
    assert sh(kvm_in_l1, "test -e /run/vmharness/journal.jsonl && echo left || echo gone").strip() == "gone"


# An instance's own KVM modules (kvm_modules): a copy of the stock kvm_amd.ko at another path, in a folder
# only root can write (L1's /run is its own tmpfs, mode 755), loaded by the harness in place of the stock
# one, and the stock one loaded again by modprobe afterwards.
COPIES = "/run/kvmcopy"
_COPY = """
import lzma, os, sys
src, dst, other, unsigned = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "unsigned"
data = open(src, "rb").read()
data = lzma.decompress(data) if src.endswith(".xz") else data
magic = b"~Module signature appended~\\n"
if unsigned:  # as make M= builds it: the signature (its length in the 12 bytes before the magic) cut off
    assert data.endswith(magic)
    sig_len = int.from_bytes(data[-len(magic) - 4:-len(magic)], "big")
    data = data[:-(len(magic) + 12 + sig_len)]
if other:  # the same module, its vermagic's release rewritten: a module for another kernel as modinfo reads it
    release = os.uname().release.encode()
    assert data.count(b"vermagic=" + release) == 1
    data = data.replace(b"vermagic=" + release, b"vermagic=" + other.encode()[:len(release)].ljust(len(release), b"x"))
os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
with open(dst, "wb") as f:
    f.write(data)
os.chmod(dst, 0o644)
"""
_MODULES = """
import json, os, sys
from vmharness.host.prepare import knobs
from vmharness.system.root import HostRoot
a = knobs.apply(HostRoot("/"), "b", {}, "run:rig-kvm-modules", lambda line: None, (sys.argv[2],))
print(json.dumps(a.report), flush=True)
print(open("/sys/module/kvm_amd/taint").read().strip(), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), 9)
print(knobs.give_back(HostRoot("/"), a, lambda line: None))
"""


def _stock(rig: Rig) -> tuple[str, str, list[str]]:
    """The loaded kvm_amd: the stock file, its taint flags ("" for the stock, signed module; `E` for
    one loaded unsigned) and its load-time knobs. (Debian's kernel has no srcversion for it: built
    without CONFIG_MODULE_SRCVERSION_ALL, and kvm_amd has no MODULE_VERSION.)"""
    path = sh(rig, "modinfo -n kvm_amd").strip()
    src = sh(rig, "cat /sys/module/kvm_amd/taint").strip()
    knobs = sh(rig, "cat " + " ".join(PARAMS.format(module="kvm_amd", name=n) for n in ("npt", "nested")))
    return path, src, knobs.split()


def _copy(rig: Rig, src: str, dst: str, other_release: str = "", unsigned: bool = False) -> None:
    rig.run([sys.executable, "-c", _COPY, src, dst, other_release, "unsigned" if unsigned else "signed"],
            timeout=120, check=True)


@pytest.mark.parametrize("ending", ["give-back", "kill"])
def test_an_instances_kvm_module_is_loaded_from_its_file_and_the_stock_one_given_back(kvm_in_l1: Rig,
                                                                                       ending: str) -> None:
    """The harness's own code on a real KVM: the copy checked (vermagic of L1's kernel), the stock kvm_amd
    unloaded and the copy inserted with the stock one's load-time parameters, then the stock one loaded
    again by the run's give-back, or, after a SIGKILL, by `vmharness host-restore`. A plain copy once
    loaded reads as the stock module, so the killed case loads the copy without its signature (as a
    module built with make M= is): the kernel marks it `E` (loaded unsigned) while it is loaded, and the
    module that reads unmarked afterwards is the stock one, loaded again."""
    stock, taint, before = _stock(kvm_in_l1)
    assert taint == "" and before == ["Y", "1"]
    copy = f"{COPIES}/{ending}/kvm-amd.ko"
    _copy(kvm_in_l1, stock, copy, unsigned=ending == "kill")
    env = {"PYTHONPATH": str(kvm_in_l1.repo)}
    res = kvm_in_l1.run([sys.executable, "-c", _MODULES, ending, copy], timeout=300, env=env)
    lines = res.stdout.splitlines()
    assert len(lines) >= 2, res.stdout + res.stderr
    [loaded] = json.loads(lines[0])["kvm_modules"]
    assert loaded["path"] == copy and loaded["name"] == "kvm_amd", loaded
    assert loaded["vermagic"].split()[0] == sh(kvm_in_l1, "uname -r").strip()
    assert loaded["srcversion"] == loaded["reads"] == ""  # Debian's kvm_amd has none (see _stock)
    assert loaded["taint"] == lines[1] == ("E" if ending == "kill" else ""), res.stdout + res.stderr
    if ending == "kill":
        assert sh(kvm_in_l1, "cat /sys/module/kvm_amd/taint").strip() == "E"  # the copy, left loaded
        assert json.loads(sh(kvm_in_l1, "cat /run/vmharness/journal.jsonl"))["files"][0]["path"] == copy
        restore = commands.vmharness(kvm_in_l1, "host-restore", timeout=300)
        assert restore.ok and f"{copy} loaded in place of kvm_amd" in restore.stdout + restore.stderr, restore.stderr
    else:
        assert lines[2] == "[]", res.stdout + res.stderr
    assert _stock(kvm_in_l1) == (stock, "", before)
    assert sh(kvm_in_l1, "test -e /run/vmharness/journal.jsonl && echo left || echo gone").strip() == "gone"


def test_a_kvm_module_for_another_kernel_is_refused_with_both_strings(kvm_in_l1: Rig) -> None:
    """The stock kvm_amd.ko with its vermagic's release rewritten: `run --print-xml` refuses it before
    anything is touched, naming both strings, and the stock module stays loaded as it was."""
    stock, src, before = _stock(kvm_in_l1)
    bad = f"{COPIES}/other/kvm-amd.ko"
    _copy(kvm_in_l1, stock, bad, "9.9.9-rig-other")
    vermagic = sh(kvm_in_l1, f"modinfo -F vermagic {bad}").strip()
    release = sh(kvm_in_l1, "uname -r").strip()
    assert vermagic.startswith("9.9.9-rig-") and vermagic.split()[0] != release
    sh(kvm_in_l1, f"printf '[guest]\\naccel = \"tcg\"\\n[[instance]]\\nname = \"b\"\\nkvm_modules = [\"{bad}\"]\\n'"
                  f" > {COPIES}/other/r.toml")
    res = commands.vmharness(kvm_in_l1, "run", f"{COPIES}/other/r.toml", "--print-xml", timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert (f"error: config.instance[0].kvm_modules[0] {bad}: was built for another kernel: its vermagic is "
            f"{vermagic!r}, and the running kernel is {release!r}") in res.stderr
    assert _stock(kvm_in_l1) == (stock, src, before)
