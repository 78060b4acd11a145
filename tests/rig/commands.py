"""The harness's commands in the rig's L1, each forked from one interpreter there that imported the
CLI once (`python -m tests.forked_cli --listen PORT`, started at the first command).

Under TCG a fresh interpreter in L1 takes 8-13 s to start a command (`host-restore` with nothing to
give back: 8 s, against 0.25 s on this machine), so a rig test's commands were most of its time. The
command in the forked child is the CLI's `main()` with its own signal handling and exit status, as
tests/forked_cli.py says and tests/unit/test_forked_cli.py holds to a real `python -m vmharness.cli`.
What depends on the process itself goes through the installed command, `Rig.run([VMHARNESS, ...])`:
a command killed half-way (test_prepare_in_vm.py), a run that detaches or is resumed after a reboot
(test_run_nested.py, test_host_boots_in_l1.py), so the console script is still started for real there.

The client is bash alone (`/dev/tcp`): the request goes as one argument; it prints the answer, `CODE
HUNG`, on its first line, then the command's output, kept in two files in L1's own /tmp."""

from __future__ import annotations

import json
import secrets
import weakref
from collections.abc import Mapping, Sequence

from tests.rig.rig import GUEST_ENV, Rig
from vmharness.errors import HarnessError
from vmharness.system.proc import Result

PORT = 7911  # on L1's loopback
START = 300.0  # seconds for the server to import the CLI under TCG and listen

_CLIENT = r"""
exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 125
printf '%s\n' "$1" >&3
read -r answer <&3 || exit 125
printf '%s\n' "$answer"
cat -- "$2"; cat -- "$3" >&2; rm -f -- "$2" "$3"
"""
_SERVE = f"setsid {{python}} -m tests.forked_cli --listen {PORT} </dev/null >/tmp/forked-cli.log 2>&1 &"
_UP = f'exec 3<>/dev/tcp/127.0.0.1/{PORT}'

_serving: weakref.WeakSet[Rig] = weakref.WeakSet()


def _serve(rig: Rig) -> None:
    """The server in L1, and once it listens, remembered for this rig."""
    if rig in _serving:
        return
    python = rig.repo / ".venv/bin/python"
    rig.run(["sh", "-c", _SERVE.format(python=python)], timeout=60, env={"PYTHONPATH": str(rig.repo)}, check=True)
    waited = rig.run(["bash", "-c", f"for i in $(seq {int(START)}); do ({_UP}) 2>/dev/null && exit 0; sleep 1; done;"
                      " cat /tmp/forked-cli.log; exit 1"], timeout=START + 60)
    if not waited.ok:
        raise HarnessError(f"in L1: the command server did not listen within {START:g} s: " + waited.stdout[-2000:])
    _serving.add(rig)


def vmharness(rig: Rig, *args: str, timeout: float = 600, env: Mapping[str, str] | None = None) -> Result:
    """`vmharness ARGS` in L1 (as root, in /, GUEST_ENV with `env` on top), its output and exit status
    (negative: the signal that ended it) as Rig.run gives them; past `timeout` it is killed and this
    raises, as Rig.run does."""
    _serve(rig)
    ran = rig.run(client(PORT, args, timeout, {**GUEST_ENV, **(env or {})}, "/tmp"), timeout=timeout + 60)
    return answer(args, timeout, ran)


def client(port: int, args: Sequence[str], timeout: float, env: Mapping[str, str], tmp: str) -> list[str]:
    """The client's argv: the request for `vmharness ARGS` (in /, with `env` alone), its output kept
    in two files of a fresh name under `tmp` until the client prints them."""
    tag = secrets.token_hex(8)
    out, err = f"{tmp}/forked-{tag}.out", f"{tmp}/forked-{tag}.err"
    req = {"argv": list(args), "cwd": "/", "env": dict(env), "timeout": timeout, "out": out, "err": err}
    return ["bash", "-c", _CLIENT, str(port), json.dumps(req), out, err]


def answer(args: Sequence[str], timeout: float, res: Result) -> Result:
    """What the client printed, as the command's own Result; a server that did not answer, a command
    past its timeout or one that ended with a traceback raise."""
    argv = ("vmharness", *args)
    answer, _, out_text = res.stdout.partition("\n")
    if not res.ok or len(answer.split()) != 2:
        raise HarnessError(f"in L1: the command server did not answer for {' '.join(argv)} ({res.how}): "
                           + res.stderr[-2000:])
    code, hung = (int(word) for word in answer.split())
    if hung:
        raise HarnessError(f"in L1: {' '.join(argv)} did not finish within {timeout:g} s: " + res.stderr[-2000:])
    if "Traceback (most recent call last)" in res.stderr:  # a harness command ends with one line, never this
        raise HarnessError(f"in L1: {' '.join(argv)} ended with a traceback: " + res.stderr[-4000:])
    return Result(argv, code, out_text, res.stderr)
