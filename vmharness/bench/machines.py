"""The machines a bench configuration names, and what a run folder's manifest records of them: a host
name of the configuration (`local`, or an ssh destination) as the Machine that reaches it, and each
machine's kernel, CPUs and tools' versions (nginx per instance on the server, wrk on each client), read
once when the run begins so that a result can be traced to what produced it; and each client's wrk
checked to start there before any work (`check_clients`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vmharness.errors import HarnessError
from vmharness.model.sections import BenchConfig, ClientSection, InstanceSection
from vmharness.system.machine import Machine


def machine(host: str) -> Machine:
    return Machine(None if host == "local" else host)


def first_line(m: Machine, argv: list[str]) -> str:
    try:
        res = m.run(argv, timeout=30, check=False)
    except HarnessError as exc:
        return exc.message
    text = (res.stdout + res.stderr).strip()
    return text.splitlines()[0] if text else ""


def server_versions(m: Machine, instances: tuple[InstanceSection, ...]) -> dict[str, Any]:
    return {"machine": m.key, "kernel": first_line(m, ["uname", "-r"]), "cpus": first_line(m, ["nproc"]),
            "nginx": {i.name: first_line(m, [i.nginx, "-v"]) for i in instances}}


def client_versions(cfg: BenchConfig) -> list[dict[str, Any]]:
    return [{"machine": machine(c.host).key, "kernel": first_line(machine(c.host), ["uname", "-r"]),
             "cpus": first_line(machine(c.host), ["nproc"]), "wrk": first_line(machine(c.host), [c.wrk, "--version"])}
            for c in cfg.client]


def versions(cfg: BenchConfig) -> dict[str, Any]:
    """What the manifest records about each machine and tool."""
    return {"server": server_versions(machine(cfg.server.host), cfg.instance), "clients": client_versions(cfg)}


# The exit status of a program a shell (ssh's remote side) could not start: not found, not executable
NOT_STARTED = {126: "is not executable", 127: "is not found"}


def check_clients(clients: Sequence[ClientSection]) -> None:
    """Each client's wrk started once (`--version`, which wrk answers with status 1) before anything is
    taken: one that does not start there is said first, naming its key, where every point of the sweep
    failed before (a campaign's cell without its wrk took as long to fail as a whole cell to run). A
    client that cannot be reached is left to the sweep, which says so for each point."""
    for i, c in enumerate(clients):
        m = machine(c.host)
        try:
            res = m.run([c.wrk, "--version"], timeout=30, check=False)
        except HarnessError as exc:  # here: the file is missing or not a program
            raise HarnessError(f"client.{i}.wrk {c.wrk!r} cannot be started on {m.label}: {exc.message}",
                               "install wrk (apt-get install wrk) or give its path in [[client]] wrk") from exc
        if res.returncode in NOT_STARTED and not m.local:
            raise HarnessError(f"client.{i}.wrk {c.wrk!r} {NOT_STARTED[res.returncode]} on {m.label}",
                               "install wrk there (apt-get install wrk) or give its path in [[client]] wrk")
