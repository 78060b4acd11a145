"""The machines a bench configuration names, and what a run folder's manifest records of them: a host
name of the configuration (`local`, or an ssh destination) as the Machine that reaches it, and each
machine's kernel, CPUs and tools' versions (nginx per instance on the server, wrk on each client), read
once when the run begins so that a result can be traced to what produced it."""

from __future__ import annotations

from typing import Any

from vmharness.errors import HarnessError
from vmharness.model.sections import BenchConfig, InstanceSection
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
