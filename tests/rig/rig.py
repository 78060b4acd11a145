"""The rig: an L1 guest under TCG with an IOMMU, two NUMA nodes, three e1000e functions and a
multiqueue vmxnet3, which sees L0's root read-only and runs commands through the guest agent."""

from __future__ import annotations

import atexit
import logging
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.rig import initramfs, kernel, kexec_tools, l0_trees, leftovers, topology
from tests.rig.console_watch import ConsoleWatch, Stalled
from tests.rig.failures import (
    CONSOLE_LINES,
    SAID_BEFORE_AN_EXIT,
    STALLED_BOOT,
    STALLS,
    WEDGED,
    ResetItself,
    RigError,
    Wedged,
    described,
    left_wedged,
)
from tests.rig.paths import REPO, cache_dir
from tests.rig.qga import AgentError, AgentSilent, GuestAgent
from tests.rig.qmp import quit_qemu, sysrq, where_cpus
from tests.rig.timer_watch import Late, TimerLost, TimerWatch, overdue
from vmharness.errors import HarnessError
from vmharness.system.proc import Result, spawn, stop

log = logging.getLogger("tests.rig")

GUEST_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
"""The environment of every command run in L1; `env=` entries are added on top."""

_DISCOVER = r"""
for d in /sys/class/net/*; do
    [ -e "$d/device" ] || continue
    echo "${d##*/} $(cat "$d/address") $(basename "$(readlink -f "$d/device")")"
done
"""


@dataclass(frozen=True)
class Nic:
    name: str  # nic0 ... nic3: the QEMU device id
    mac: str
    hub: int  # QEMU hub of its hubport
    bdf: str  # PCI address as L1 sees it, e.g. 0000:81:00.1
    ifname: str  # L1's interface name while e1000e drives it


SYSRQ_WAIT = 3.0  # seconds for L1's kernel to print what a sysrq key asked for
SYSRQ_LINES = 80  # of it, in the failure's message (the whole console is kept)
BOOT_LOOK_S = 2.0  # seconds between await_boot's looks at L1's boot id while it answers from the old boot
SILENT_RETRY_S = 1.0  # and between its tries while L1's agent does not answer
RESET_LOOK_LINES = 40  # of L1's console's end, looked through for why its QEMU exited (a panic's stack fits)
TIMER_LIST_WAIT = 20.0  # seconds for L1's agent to give its /proc/timer_list
TIMERS = "L1's overdue timers (/proc/timer_list)"  # their part of a failure's message
LOST_AT_ONE_LOOK_S = 60.0  # a timer this overdue at a single look was lost (check_timers)
LATE_TIMERS = "late-timers.log"  # in the rig's cache: each timer of L1 a look found late (_note_late)


class Rig:
    """Use `Rig.start()`, as a context manager or with `stop()` in a `finally`."""

    repo: Path = REPO
    """The repository root; the same path works inside L1."""

    def __init__(self, kern: kernel.Kernel, files: topology.Files, qemu: subprocess.Popen[bytes]) -> None:
        self.kernel = kern
        self.files = files
        self.qemu = qemu
        self.agent = GuestAgent(files.agent)
        self.nics: dict[str, Nic] = {}
        self.boot_seconds = 0.0
        self._stopped = False
        self._wedged: Wedged | None = None
        # from the end of L1's first boot: its console and its timers, read while a command runs
        self._watches: tuple[Callable[[], None], ...] = ()
        atexit.register(self.stop)

    @property
    def release(self) -> str:
        return self.kernel.release

    @property
    def nic0(self) -> Nic:
        return self.nics["nic0"]

    @property
    def nic1(self) -> Nic:
        return self.nics["nic1"]

    @property
    def nic2(self) -> Nic:
        return self.nics["nic2"]

    @property
    def nic3(self) -> Nic:
        """The multiqueue NIC (vmxnet3) on node 1, in an IOMMU group of its own."""
        return self.nics["nic3"]

    @classmethod
    def start(cls, timeout: float = 180.0, host_boots: bool = False, kern: kernel.Kernel | None = None,
              append: str = "", also: tuple[kernel.Kernel, ...] = ()) -> Self:
        """Boot L1 and return once its agent answers and its NICs are found. `timeout`
        covers the boot; fetching and building the kernel and initramfs have their own.
        `host_boots`: an L1 that the harness may reboot with kexec (a folder it keeps across boots,
        its /boot, kexec-tools: topology.PERSIST_TAG); `await_boot` waits for it to come back.

        A QEMU killed by a signal while L1 boots is started once more, and said: Debian's QEMU 7.2
        crashed so once on the development machine (SIGSEGV, a read at address 0xc0 in QEMU, while L1's
        kernel probed the e1000e behind the second node's root port), which failed every rig test of
        that run; the four boots after it came up in 16-21 s. A second crash, or any other failure, is
        the test's. `kern`: another kernel than bookworm's (kernel_index.py); `append`: more of L1's
        command line; `also`, with `host_boots`: the kernels L1 may kexec into besides its own, each in
        its /boot with the rig's initramfs for it (a host boot's `rig_modules=` names its modules)."""
        try:
            return cls._boot(timeout, host_boots, kern, append, also)
        except RigError as exc:
            if not (exc.crashed or exc.stalled):
                raise
            print(f"the rig: L1's first boot failed, booting it once more: {exc}".splitlines()[0], file=sys.stderr)
            log.warning("L1's first boot failed (%s); booting once more:\n%s",
                        "QEMU crashed" if exc.crashed else "a CPU stalled", exc)
        return cls._boot(timeout, host_boots, kern, append, also)

    @classmethod
    def _boot(cls, timeout: float, host_boots: bool, kern: kernel.Kernel | None, append: str,
              also: tuple[kernel.Kernel, ...]) -> Self:
        kern = kern or kernel.obtain()
        initrd = initramfs.build(kern)
        kexec = kexec_tools.obtain() if host_boots else None
        l0_trees.compile_package()
        leftovers.reap()
        files = topology.Files(leftovers.new_dir())
        if host_boots:
            l0_trees.fill_persist(files.persist, [(kern, initrd), *((k, initramfs.build(k)) for k in also)])
        cached = l0_trees.cached_trees()
        line = topology.cmdline(kern.modules, keep=(REPO, cache_dir()), cached=cached, kexec=kexec)
        argv = topology.qemu_argv(kern.boot_image, initrd, f"{line} {append}".strip(), files, persist=host_boots)
        argv += ["-pidfile", str(files.tmp / leftovers.QEMU_PID)]
        began = time.monotonic()
        try:
            with open(files.qemu_log, "wb") as qemu_log:
                qemu = spawn(argv, stdout=qemu_log.fileno(), stderr=subprocess.STDOUT)
        except BaseException:
            shutil.rmtree(files.tmp, ignore_errors=True)
            raise
        rig = cls(kern, files, qemu)
        try:
            rig._wait_for_agent(began + timeout, timeout)
            rig._discover_nics(max(began + timeout - time.monotonic(), 30.0))
            rig._watches = (ConsoleWatch(files.console), TimerWatch(rig._timer_list, note=rig._note_late))
        except BaseException:
            rig.stop()
            raise
        rig.boot_seconds = time.monotonic() - began
        log.info("L1 is up after %.1f s (%s, pid %d)", rig.boot_seconds, argv[0], qemu.pid)
        return rig

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
        *,
        input: str | None = None,
        check: bool = False,
    ) -> Result:
        """Run argv in L1, chrooted into L0's root; stdout/stderr are decoded text.
        A non-zero exit raises only with `check`; running past `timeout` always raises."""
        self._require_running()
        try:
            result = self.agent.exec(
                list(argv),
                env={**GUEST_ENV, **(env or {})},
                timeout=timeout,
                input=None if input is None else input.encode(),
                watch=self._watch,
            )
        except Stalled as exc:  # a task blocked for minutes: L1 waits for what does not come (console_watch.py)
            raise self._wedge(f"L1's kernel said {exc.line!r} while {shlex.join(argv)[:300]} ran") from None
        except TimerLost as exc:  # a CPU that never takes its timer: its sleepers never wake (timer_watch.py)
            raise self._wedge(f"{exc} while {shlex.join(argv)[:300]} ran") from None
        except AgentError as exc:
            # L1 silent or past the command's time: what its console said then is the only trace of why
            # (a nested run's L1 went silent in host-prepare's hugepage write, docs/testing.md)
            what = f"{exc.message} (running {shlex.join(argv)[:300]})"
            if isinstance(exc, AgentSilent) and exc.waited >= WEDGED:
                raise self._wedge(what, silent=True) from None
            failure = self.failure(what, silent=isinstance(exc, AgentSilent))
            raise AgentError(failure.message, failure.hint) from None
        if check and not result.ok:
            raise result.failure("in L1: ")
        return result

    def _watch(self) -> None:
        for watch in self._watches:
            watch()

    def _note_late(self, late: Late) -> None:
        """A timer of L1's that a look found late, a line in the rig's cache (LATE_TIMERS): how often
        L1's timers come late, across runs of the suite."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} L1 {self.qemu.pid} cpu{late.cpu} {late.late_s:.1f} s late\n"
        with suppress(OSError), (cache_dir() / LATE_TIMERS).open("a") as f:
            f.write(line)

    def _timer_list(self) -> str:
        """L1's /proc/timer_list, read through its agent (no process started in L1)."""
        return self.agent.read_file("/proc/timer_list", timeout=TIMER_LIST_WAIT).decode(errors="replace")

    def check_timers(self, what: str) -> None:
        """For a test that saw `what` not happen in L1 (a sleep that never ended): Wedged, L1 stopped, where
        a CPU of L1 has a timer LOST_AT_ONE_LOOK_S overdue; a machine only slow never leaves one so long
        while its agent answers. Nothing where none is, or where the timers cannot be read."""
        try:
            late = [t for t in overdue(self._timer_list()).values() if t.late_s >= LOST_AT_ONE_LOOK_S]
        except HarnessError:
            return
        if late:
            raise self._wedge(f"{what}: {TimerLost(max(late, key=lambda t: t.late_s))}")

    def put_file(self, path: str, data: bytes, *, mode: int | None = None, timeout: float = 60.0) -> None:
        """Write `data` to `path` in L1 (somewhere writable: /tmp, /run, /var/tmp)."""
        self._require_running()
        self.agent.write_file(path, data, timeout=timeout)
        if mode is not None:
            self.run(["chmod", f"{mode:o}", path], timeout=timeout, check=True)

    @contextmanager
    def kvm(self) -> Iterator[None]:
        """/dev/kvm in L1 for the block (kvm_amd loaded: L0's TCG emulates SVM with nested paging), and L1
        without it again after: the other rig tests expect none. Where the unload hangs after a block that
        passed, L1 is stopped and that is said (`unload_kvm`), not failed: what the block checked stands."""
        self.run(["sh", "-c", "modprobe kvm_amd && test -c /dev/kvm"], timeout=120, check=True)
        try:
            yield
        except BaseException:
            with suppress(HarnessError):  # the block's own failure is the one to tell
                self.unload_kvm()
            raise
        try:
            self.unload_kvm()
        except Wedged as exc:  # after a block that passed: said, and the next rig module has a fresh L1
            left_wedged(exc)

    def unload_kvm(self) -> None:
        """kvm_amd and kvm unloaded, as L1 came. A module in use fails here (a guest outlived its test); an
        unload that does not end is L1's own trouble, and L1 is Wedged (stopped): a CI run on 2026-12-02 had
        `rmmod` blocked for 120 s in a read of L0's root over 9p after an L2 under KVM in L1 (its reply never
        came), and every rig test after it failed on that L1. The session's next rig module boots a fresh one
        (tests/integration/conftest.py)."""
        try:
            self.run(["sh", "-c", "rmmod kvm_amd; rmmod kvm; ! test -e /dev/kvm"], timeout=120, check=True)
        except AgentError as exc:
            if self._wedged is not None:
                raise
            raise self._wedge("kvm_amd and kvm were not unloaded", failure=exc) from None

    def read_file(self, path: str, *, timeout: float = 60.0) -> bytes:
        self._require_running()
        return self.agent.read_file(path, timeout=timeout)

    def boot_id(self, timeout: float = 60.0) -> str:
        """L1's boot id: another one once L1 has booted again."""
        return self.read_file("/proc/sys/kernel/random/boot_id", timeout=timeout).decode().strip()

    def await_boot(self, before: str, timeout: float, going: Callable[[], None] = lambda: None) -> float:
        """Wait until L1 answers from a boot other than `before` (its boot id), and return the seconds
        that took. While L1 still answers from `before`, `going` is called now and then: it raises
        once what was to reboot L1 has ended without doing so; a HarnessError of its own (the agent gone
        quiet while it asked, as when kexec comes between the boot id and its question) decides nothing.
        An agent silent for WEDGED seconds raises Wedged (a kexec'd L1 answers again within a minute), and so
        does one that never answered within `timeout` (L1 reset, its boot hung: on 2026-12-01 one stopped in
        e1000e's probe with every vCPU halted); where it answered, from the old boot, the switch did not come."""
        began = answered = time.monotonic()
        while True:
            self._require_running()
            if time.monotonic() - began > timeout:
                if answered == began:
                    raise self._wedge(f"L1 did not boot again within {timeout:g} s, its agent silent throughout",
                                      silent=True)
                raise self.failure(f"L1 did not boot again within {timeout:g} s")
            try:
                self.agent.sync(timeout=2.0)  # replies a request sent while L1 rebooted got are skipped
                now = self.boot_id(timeout=10.0)
            except HarnessError:
                if time.monotonic() - answered > WEDGED:
                    what = f"L1's agent has not answered for {WEDGED:g} s and L1 did not boot again"
                    raise self._wedge(what, silent=True) from None
                time.sleep(SILENT_RETRY_S)
                continue
            answered = time.monotonic()
            if now != before:
                return time.monotonic() - began
            with suppress(HarnessError):  # the agent quiet under `going`: L1 may be in kexec
                going()
            time.sleep(BOOT_LOOK_S)

    def console_tail(self, lines: int = CONSOLE_LINES) -> str:
        try:
            text = self.files.console.read_text(errors="replace")
        except OSError:
            return "(no console output)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        """Quit QEMU (QMP `quit`; L1 keeps nothing worth a clean shutdown), then
        SIGTERM/SIGKILL its PID if it lingers; always remove the temp dir."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        try:
            self.agent.close()
            if self.qemu.poll() is None:
                try:
                    quit_qemu(self.files.qmp, timeout=min(timeout, 5.0))
                except (HarnessError, OSError) as exc:
                    log.info("QMP quit: %s", exc)  # QEMU may close the socket as it quits
                try:
                    self.qemu.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    log.warning("QEMU %d ignored quit; terminating it", self.qemu.pid)
            stop(self.qemu, grace=5.0)
        finally:
            shutil.rmtree(self.files.tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def usable(self) -> bool:
        """Whether commands may still be run in this L1: not stopped, not wedged, its QEMU running."""
        return not self._stopped and self._wedged is None and self.qemu.poll() is None

    def _require_running(self) -> None:
        if self._wedged is not None:  # said once, with L1's console; what follows fails at once
            raise Wedged(f"L1 wedged earlier and was stopped: {self._wedged.message.splitlines()[0]}",
                         self._wedged.hint)
        if self._stopped:
            raise RigError("the rig has been stopped")
        if self.qemu.poll() is not None:
            what = f"QEMU exited with status {self.qemu.returncode}"
            if self.qemu.returncode == 0 and not any(said in self.console_tail(lines=RESET_LOOK_LINES)
                                                     for said in SAID_BEFORE_AN_EXIT):
                raise self._wedge(f"{what}: L1 reset itself, its console saying nothing of why", ResetItself)
            raise self.failure(what)

    def _wait_for_agent(self, deadline: float, timeout: float) -> None:
        self.agent.connect(timeout=max(deadline - time.monotonic(), 0.1))
        while True:
            if self.qemu.poll() is not None:
                failure = self.failure(f"QEMU exited with status {self.qemu.returncode} during boot")
                failure.crashed = self.qemu.returncode < 0
                raise failure
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.failure(f"the guest agent in L1 did not answer within {timeout:g} s", silent=True)
            waited = timeout - remaining
            if waited > STALLED_BOOT and any(said in self.console_tail(lines=1000) for said in STALLS):
                failure = self.failure(f"L1's kernel reported a stalled CPU or task and its agent did not answer "
                                        f"within {waited:.0f} s", silent=True)
                failure.stalled = True
                raise failure
            try:
                # Short tries: an unanswered sync only leaves a stale reply to skip.
                self.agent.sync(timeout=min(remaining, 0.5))
                return
            except HarnessError:
                continue

    def _discover_nics(self, timeout: float) -> None:
        """Find each NIC by its MAC, and check the layout the tests rely on."""
        out = self.run(["sh", "-c", _DISCOVER], timeout=timeout, check=True).stdout
        seen: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            ifname, mac, bdf = line.split()
            seen[mac.lower()] = (ifname, bdf)
        for spec in topology.NICS:
            if spec.mac not in seen:
                raise self.failure(f"no interface in L1 has {spec.name}'s MAC {spec.mac}: {out!r}")
            ifname, bdf = seen[spec.mac]
            self.nics[spec.name] = Nic(spec.name, spec.mac, spec.hub, bdf, ifname)
        one, two = self.nic1.bdf, self.nic2.bdf
        if one[:-1] != two[:-1] or not (one.endswith(".0") and two.endswith(".1")):
            raise self.failure(f"nic1 {one} and nic2 {two} are not functions 0 and 1 of one slot")
        if self.nic0.bdf.split(":")[1] == one.split(":")[1]:
            raise self.failure(f"nic0 {self.nic0.bdf} shares a bus with nic1 {one}")

    def _wedge(self, what: str, kind: type[Wedged] = Wedged, failure: HarnessError | None = None,
               silent: bool = False) -> Wedged:
        """L1 wedged: said with its console and vCPUs (`failure`, where they were read already), then
        stopped. Its QEMU spun on at 170-190% of the two cores while a wedged nested run's test waited out
        two more silences (the run's, then host-restore's in its `finally`: CI's run of d986ba9, 923 s),
        slowing every test beside it."""
        failure = failure or self.failure(what, silent=silent)
        self._wedged = kind(failure.message if what in failure.message else f"{what}: {failure.message}",
                            failure.hint)
        self.stop()
        return self._wedged

    def failure(self, what: str, silent: bool = False) -> RigError:
        """`what` went wrong in L1: said with QEMU's output, L1's vCPUs and blocked tasks (where it runs),
        its overdue timers (asked of its agent, unless the agent is `silent`: the question would wait out
        TIMER_LIST_WAIT for nothing) and its console's end."""
        try:
            qemu_out = self.files.qemu_log.read_text(errors="replace").strip()
        except OSError:
            qemu_out = ""
        extra = [("QEMU's own output", qemu_out[-3000:])] if qemu_out else []
        if self.qemu.poll() is None and self.files.qmp.exists():
            extra += self._where_l1_waits()
        if self.qemu.poll() is None:
            extra += [(TIMERS, "not read: L1's agent is silent")] if silent else self._late_timers()
        try:
            console = self.files.console.read_text(errors="replace")
        except OSError:
            console = ""
        return RigError(*described(what, "L1", console, extra, "last-failed-console.log"))

    def _late_timers(self) -> list[tuple[str, str]]:
        """Each CPU of a running L1 with a timer in the past, and how long ago it was due: a CPU whose
        timer stays due never took its interrupt (timer_watch.py); a machine only slow has none far late."""
        try:
            late = overdue(self._timer_list())
        except HarnessError as exc:
            return [(TIMERS, f"not read: {exc.message}")]
        said = "; ".join(f"cpu{t.cpu} {t.late_s:.1f} s late" for _, t in sorted(late.items()))
        return [(TIMERS, said or "none")]

    def _where_l1_waits(self) -> list[tuple[str, str]]:
        """A running L1 that failed: where its vCPUs are (all halted: it waits for something that does not
        come; else where they spin), and its kernel's blocked tasks with their stacks (sysrq w, sent as a
        key through QEMU's keyboard: L1 boots with sysrq_always_enabled), which its console then holds. An
        L1 boot that hung in e1000e's probe with every vCPU halted and no hung-task report is what this is
        for (docs/testing.md)."""
        try:
            cpus = where_cpus(self.files.qmp, timeout=10)
            before = self.files.console.stat().st_size if self.files.console.exists() else 0
            sysrq(self.files.qmp, "w", timeout=10)
            time.sleep(SYSRQ_WAIT)
            with self.files.console.open("rb") as f:
                f.seek(before)
                said = f.read().decode(errors="replace").strip()
        except (HarnessError, OSError) as exc:
            return [("L1's vCPUs and blocked tasks", f"not read: {exc}")]
        return [("L1's vCPUs (QEMU's registers)", cpus),
                ("L1's blocked tasks (sysrq w)", "\n".join(said.splitlines()[-SYSRQ_LINES:]) or "(nothing said)")]
