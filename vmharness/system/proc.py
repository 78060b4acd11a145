"""The one subprocess wrapper: argv lists only, a timeout on every wait, each call logged."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vmharness.errors import HarnessError
from vmharness.signals import for_child

log = logging.getLogger("vmharness.system.proc")


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def how(self) -> str:
        """How it ended, in words: "exit 1", "killed by SIGKILL", "not found (exit 127)"."""
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        if self.returncode == 127:
            return "not found (exit 127)"  # the shell's (or ssh's remote shell's) word for it
        return f"exit {self.returncode}"

    def failure(self, where: str = "") -> HarnessError:
        """The error for a command that exited non-zero: its last line of output says why. ssh's own
        failure (exit 255: the machine could not be reached or would not let us in) names the machine
        and ssh's reason, not the command it was to run there, with what to check."""
        detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
        last = detail[-1] if detail else "no output"
        dest = unreachable(self)
        if dest is not None:
            config = self.argv[self.argv.index("-F") + 1] if "-F" in self.argv[:self.argv.index("--")] else ""
            return HarnessError(f"{where}{dest} is unreachable over ssh ({self.how}): {last}", ssh_hint(dest, config))
        return HarnessError(f"{where}{shlex.join(self.argv)} failed ({self.how}): {last}")


def unreachable(res: Result) -> str | None:
    """The destination of an ssh that failed by itself (exit 255), or None."""
    argv = res.argv
    if res.returncode != 255 or not argv or argv[0] != "ssh" or "--" not in argv[:-1]:
        return None
    return argv[argv.index("--") + 1]


def ssh_hint(dest: str, config: str = "") -> str:
    """What to check when ssh cannot reach `dest` (`config`: the -F file vmharness gave ssh, if any)."""
    where = f"its Host entry in {config}" if config else "~/.ssh/config"
    return (f"check that `ssh {dest} true` works without a prompt (vmharness runs ssh with BatchMode=yes: "
            f"a key, no password), and {where}")


def _not_installed(program: str) -> HarnessError:
    return HarnessError(f"{program} is not installed", f"install the package that provides {program}")


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The child's environment: ours, with the locale pinned so that the output parsed (ip, ethtool,
    error messages) reads the same on every machine, then the caller's additions."""
    env = dict(os.environ)
    env.pop("LANGUAGE", None)
    env["LC_ALL"] = "C"
    env.update(extra or {})
    return env


STOP_GRACE = 10.0  # seconds a child has after SIGTERM before SIGKILL, when the harness itself is stopped


def _stop_child(p: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE: a tool killed at once cannot undo what it did (mmdebstrap
    leaves its chroot's /proc, /sys and /dev mounted in the image's build folder)."""
    p.terminate()
    try:
        p.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        p.kill()
        _reap_killed(p)


def run(
    argv: Sequence[str | Path],
    *,
    timeout: float,
    check: bool = True,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Result:
    """Run argv to completion. A missing program or a timeout is a HarnessError;
    a non-zero exit is one too when `check` is set."""
    args = [str(a) for a in argv]
    log.debug("run: %s", shlex.join(args))
    try:
        with for_child():  # subprocess.run, the start apart: a child starts with SIGPIPE unblocked
            p = subprocess.Popen(args, stdin=None if input is None else subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, encoding="utf-8",
                                 errors="replace",  # a tool's output that is not UTF-8 is still read, never a traceback
                                 env=_env(env), cwd=cwd)
    except FileNotFoundError as exc:
        raise _not_installed(args[0]) from exc
    except OSError as exc:  # a file that is no program (no execute bit, a folder, a format the kernel refuses)
        raise HarnessError(f"{args[0]} cannot be started: {exc.strerror}", "give the path of a program") from exc
    with p:
        try:
            stdout, stderr = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            p.kill()
            p.wait()
            raise HarnessError(
                f"{shlex.join(args)} did not finish within {timeout:g} s",
                "the tool hung; check the machine's state and retry",
            ) from exc
        except BaseException:  # a signal or Ctrl-C: the child asked to stop, as the harness is
            _stop_child(p)
            raise
    result = Result(tuple(args), p.returncode, stdout, stderr)
    if check and not result.ok:
        raise result.failure()
    return result


def spawn(
    argv: Sequence[str | Path],
    *,
    stdout: int | None = subprocess.DEVNULL,
    stderr: int | None = subprocess.DEVNULL,
    stdin: int | None = subprocess.DEVNULL,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    die_with_parent: bool = False,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Start a long-running process in its own session; the caller stops it by PID
    (see `stop`). With `die_with_parent` the kernel kills it if the harness dies first
    (PR_SET_PDEATHSIG), for helpers that must not outlive a crashed run. `pass_fds`: file
    descriptors it keeps (as subprocess.Popen's)."""
    args = [str(a) for a in argv]
    log.debug("spawn: %s", shlex.join(args))
    try:
        with for_child():
            return subprocess.Popen(
                args,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=_env(env),
                cwd=cwd,
                start_new_session=True,
                pass_fds=pass_fds,
                preexec_fn=_kill_me_with_parent if die_with_parent else None,
            )
    except FileNotFoundError as exc:
        raise _not_installed(args[0]) from exc


# prctl, looked up once here: the child between fork and exec must not dlopen (glibc's loader lock, held
# by another thread of the harness at the fork, stays held in the child, which would then hang there
# holding every descriptor of the harness, its host lock among them, and never exec)
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _kill_me_with_parent() -> None:
    _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop(p: subprocess.Popen[bytes], *, grace: float = 5.0, group: bool = False) -> int:
    """Stop a process this harness started: SIGTERM, then SIGKILL after `grace` seconds. With `group`,
    its whole process group (it leads one: see `spawn`), so that a shell's children go with it."""
    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)

    if p.poll() is None or group:
        send(signal.SIGTERM)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            _reap_killed(p)
    return p.returncode


KILL_WAIT = 60.0  # seconds a SIGKILLed child has to end: it ends when it leaves the kernel, which a
#                  loaded machine (or one whose own KVM is emulated) can take seconds to let it do


def _reap_killed(p: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Wait for a child sent SIGKILL. One that outlives KILL_WAIT is stuck in the kernel: an error
    naming it and where it waits, not a wait that never ends nor a traceback."""
    try:
        p.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        name = Path(str(p.args[0] if isinstance(p.args, list | tuple) else p.args)).name
        raise HarnessError(
            f"process {p.pid} ({name}) did not end within {KILL_WAIT:g} s of SIGKILL: it is stuck in the "
            f"kernel{_where(p.pid)}",
            f"`cat /proc/{p.pid}/stack` shows where; it ends when the kernel lets it, or at a reboot") from None


def _where(pid: int) -> str:
    """', in state D at WCHAN' for a live PID, read from /proc; '' where that cannot be read."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except (OSError, IndexError):
        return ""
    return f", in state {state}" + (f" at {wchan}" if wchan and wchan != "0" else "")
