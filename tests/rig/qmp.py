"""Just enough QMP to ask QEMU to quit, to reset L1 as someone else would, or to say where L1's vCPUs are."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.rig.jsonsock import JsonSocket
from vmharness.errors import HarnessError


class _Session:
    def __init__(self, sock: JsonSocket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def execute(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Run `name` and return what it returns; HarnessError if QEMU refuses it (events that come
        meanwhile are passed over)."""
        self.sock.send({"execute": name, **({"arguments": arguments} if arguments else {})})
        while not {"return", "error"} & (reply := self.sock.receive(self.deadline)).keys():
            pass
        if "error" in reply:
            raise HarnessError(f"QMP {name}: {reply['error']}", "see QEMU's log in the rig's folder")
        return reply["return"]

    def await_event(self, name: str) -> None:
        while self.sock.receive(self.deadline).get("event") != name:
            pass


@contextmanager
def _session(path: Path, timeout: float) -> Iterator[_Session]:
    """A QMP session past its greeting and capabilities; HarnessError once `timeout` has passed."""
    deadline = time.monotonic() + timeout
    sock = JsonSocket(path)
    sock.connect(timeout)
    try:
        while "QMP" not in sock.receive(deadline):
            pass
        session = _Session(sock, deadline)
        session.execute("qmp_capabilities")
        yield session
    finally:
        sock.close()


def quit_qemu(path: Path, timeout: float) -> None:
    with _session(path, timeout) as qmp:
        qmp.execute("quit")


def reset(path: Path, timeout: float) -> None:
    """Reset the machine, as a watchdog or someone at its console would. The rig runs QEMU with
    -no-reboot (a reboot ends it), so the reboot action is `reset` from here on, until `reboot_ends_qemu`
    is called once the machine has booted again: QEMU 7.2 ended instead of resetting where the action was
    put back right after the request, and once where it was put back at its RESET event (a clean clone of
    aecf8ba: L1's console showed no second boot), so the boot after the reset runs under `reset` whole."""
    with _session(path, timeout) as qmp:
        qmp.execute("set-action", {"reboot": "reset"})
        qmp.execute("system_reset")
        qmp.await_event("RESET")


def reboot_ends_qemu(path: Path, timeout: float) -> None:
    """The rig's own reboot action again: a reboot (a panic with panic=-1) ends QEMU."""
    with _session(path, timeout) as qmp:
        qmp.execute("set-action", {"reboot": "shutdown"})


_CPU = re.compile(r"^CPU#(\d+)\r?$", re.MULTILINE)
_RIP = re.compile(r"[RE]IP=([0-9a-f]+)")
_HLT = re.compile(r"HLT=(\d)")


def where_cpus(path: Path, timeout: float) -> str:
    """Each vCPU's instruction pointer and whether it is halted, from QEMU's register dump (HMP `info
    registers -a`), and what its local APIC holds in service, with its timer's mode (HMP `info lapic`),
    in one line: a guest that hangs with every vCPU halted waits for an interrupt that does not come; one
    that spins shows where. A vector left in service blocks every interrupt of its class and below (L1's
    hangs under QEMU 10.0's threaded TCG: the timer's, topology.ONE_CPU_AT_BOOT)."""
    with _session(path, timeout) as qmp:
        dump = str(qmp.execute("human-monitor-command", {"command-line": "info registers -a"}))
        apics = {cpu: str(qmp.execute("human-monitor-command", {"command-line": f"info lapic {cpu}"}))
                 for cpu in _CPU.findall(dump)}
        return described_cpus(dump, apics)


def sysrq(path: Path, key: str, timeout: float) -> None:
    """Magic SysRq `key` sent to the guest as Alt-SysRq-KEY through QEMU's PS/2 keyboard (HMP sendkey),
    for a guest whose serial console takes no input."""
    if not re.fullmatch(r"[a-z0-9]", key):
        raise ValueError(f"not a sysrq key: {key!r}")
    with _session(path, timeout) as qmp:
        qmp.execute("human-monitor-command", {"command-line": f"sendkey alt-sysrq-{key}"})


def described_cpus(dump: str, apics: Mapping[str, str] | None = None) -> str:
    """`dump`: HMP's `info registers -a`; `apics`: HMP's `info lapic N` by CPU number, where read."""
    parts = _CPU.split(dump)[1:]
    said = []
    for cpu, regs in zip(parts[::2], parts[1::2], strict=True):
        rip, hlt = _RIP.search(regs), _HLT.search(regs)
        said.append(f"cpu{cpu} RIP={rip.group(1) if rip else '?'}{' halted' if hlt and hlt.group(1) == '1' else ''}"
                    f"{described_apic((apics or {}).get(cpu, ''))}")
    return "; ".join(said) or "no vCPU in QEMU's register dump"


_ISR = re.compile(r"^ISR\s+(.*?)\s*$", re.MULTILINE)
_TIMER_MODE = re.compile(r"^LVTT\s.*?\b(one-shot|periodic|tsc-deadline)\b", re.MULTILINE)


def described_apic(lapic: str) -> str:
    """What one vCPU's local APIC holds in service and its timer's mode, from HMP's `info lapic`."""
    isr, mode = _ISR.search(lapic), _TIMER_MODE.search(lapic)
    if not isr:
        return ""
    held = isr.group(1)
    return f" (APIC in service: {'none' if held == '(none)' else held}{f', timer {mode.group(1)}' if mode else ''})"
