"""The QEMU guest agent, reached through libvirt (so it works wherever the connection URI points):
ping, run a command and collect its output, write a file, list interfaces."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import libvirt
import libvirt_qemu

from vmharness import userfile
from vmharness.errors import HarnessError
from vmharness.system import proc

# Bytes per guest-file-write. Measured with libvirt 9.0 and qemu-ga 7.2: 128 KiB (175 KB of base64)
# goes through, 192 KiB stalls the agent channel until libvirt times out. 64 KiB keeps a margin.
MAX_COPY = 256 << 20  # bytes: a file `vm exec --copy` sends through the agent, base64 in 64 KiB blocks
CHUNK = 64 << 10


SAID = "guest agent: "  # how an agent's failure begins, wherever it is said


class AgentError(HarnessError):
    """The agent did not answer, or answered with an error."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{SAID}{message}", "is the guest still up? `vmharness vm console NAME` shows it")


TCG_PATIENCE = 10.0  # a guest under TCG runs its commands several to a hundred times slower


def patience(kvm: bool) -> float:
    """How many times longer than under KVM a guest's commands may take: under TCG (and TCG inside
    TCG, in the nested rig) a fork and exec while the guest is still starting its services takes
    seconds, and a short shell loop over sysfs can take over a minute."""
    return 1.0 if kvm else TCG_PATIENCE


def command(dom: libvirt.virDomain, execute: str, timeout: int = 10, **arguments: Any) -> Any:
    message: dict[str, Any] = {"execute": execute}
    if arguments:
        message["arguments"] = arguments
    try:
        reply = libvirt_qemu.qemuAgentCommand(dom, json.dumps(message), timeout, 0)
    except libvirt.libvirtError as exc:
        raise AgentError(str(exc).strip()) from exc
    if reply is None:
        raise AgentError(f"no reply to {execute}")
    data = json.loads(reply)
    if "error" in data:
        raise AgentError(f"{execute}: {data['error'].get('desc', data['error'])}")
    return data.get("return")


def ping(dom: libvirt.virDomain, timeout: int = 3) -> bool:
    try:
        command(dom, "guest-ping", timeout=timeout)
    except AgentError:
        return False
    return True


def run(dom: libvirt.virDomain, argv: list[str], timeout: float = 60, input: bytes | None = None) -> proc.Result:
    """Run argv in the guest (no shell), wait for it, return its exit status and output."""
    if not argv:
        raise HarnessError("no command to run in the guest", "put the command after --, e.g. -- uname -r")
    args: dict[str, Any] = {"path": argv[0], "arg": argv[1:], "capture-output": True}
    if input is not None:
        args["input-data"] = base64.b64encode(input).decode()
    started = time.monotonic()
    try:
        pid = command(dom, "guest-exec", **args)["pid"]
    except AgentError as exc:
        raise HarnessError(f"the guest could not start {argv[0]}: {exc}",
                           "give the full path of a program that exists in the guest") from exc
    deadline = started + timeout
    pause = 0.005  # a short command (a sysfs read) ends within milliseconds of its start, even under TCG
    while True:
        status = command(dom, "guest-exec-status", pid=pid)
        if status.get("exited"):
            break
        if time.monotonic() > deadline:
            raise HarnessError(f"{argv[0]} did not finish in the guest within {timeout:g} s (guest pid {pid})",
                               "raise --timeout, or check the guest with `vmharness vm console`")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
    code = status.get("exitcode", 128 + status.get("signal", 0))
    return proc.Result(tuple(argv), code, _decoded(status.get("out-data")), _decoded(status.get("err-data")))


def _decoded(data: str | None) -> str:
    return base64.b64decode(data).decode(errors="replace") if data else ""


def put_file(dom: libvirt.virDomain, local: Path, remote: str, mode: int | None = None, timeout: float = 60) -> int:
    """Copy a local file into the guest; returns the bytes written."""
    data = userfile.read(local, MAX_COPY, "copy a regular file of at most 256 MiB")
    try:
        handle = command(dom, "guest-file-open", path=remote, mode="w")
    except AgentError as exc:
        raise HarnessError(f"cannot create {remote} in the guest: {exc}", "does its folder exist?") from exc
    try:
        for start in range(0, len(data), CHUNK):
            block = base64.b64encode(data[start:start + CHUNK]).decode()
            command(dom, "guest-file-write", timeout=60, handle=handle, **{"buf-b64": block})
    finally:
        command(dom, "guest-file-close", handle=handle)
    if mode is not None:
        run(dom, ["/bin/chmod", f"{mode:o}", remote], timeout=timeout)
    return len(data)


def interfaces(dom: libvirt.virDomain) -> dict[str, str]:
    """Guest interface name by MAC address."""
    found = command(dom, "guest-network-get-interfaces")
    return {i["hardware-address"]: i["name"] for i in found if i.get("hardware-address")}
