"""A Slurm cluster on this one machine, for the campaign's tests: munged, slurmctld and four slurmd (node1
to node4, each this machine on a port of its own; node1 and node2 have the feature pair1, node3 and
node4 pair2: two pairs of nodes), started without systemd from a slurm.conf written
into a temporary folder (no cgroups, no accounting), and stopped by the PIDs this fixture started, and no
other process.

Each slurmd runs in a mount namespace of its own with a private /run/vmharness (a tmpfs): the benches its
jobs run take the harness's host lock and journal there, so they neither wait for another test's
vmharness on this machine nor leave a state file that test would see. `isolated` runs a command the same
way (the local backend's run of the same campaign)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PRIVATE_RUN = 'mkdir -p /run/vmharness && mount -t tmpfs tmpfs /run/vmharness && exec "$0" "$@"'
START_TIMEOUT = 60.0  # seconds: the nodes idle in about 3 here
NODES = ("node1", "node2", "node3", "node4")


def isolated(argv: list[str]) -> list[str]:
    """`argv` in a mount namespace of its own, with a private /run/vmharness."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_RUN, *argv]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _conf(d: Path, ports: list[int]) -> str:
    return f"""ClusterName=vmhtest
SlurmctldHost=localhost
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
KillWait=30
SlurmdParameters=config_overrides
""" + "".join(f"NodeName={n} NodeHostname=localhost Port={port} CPUs=1 Features=pair{(i + 1) // 2}\n"
            for i, (n, port) in enumerate(zip(NODES, ports[1:], strict=True), 1)) + \
        f"PartitionName=debug Nodes=node[1-{len(NODES)}] Default=YES MaxTime=INFINITE State=UP\n"


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # the environment its commands need (SLURM_CONF)

    def log(self) -> str:
        """The daemons' logs' tails, for a failing test's message."""
        out = []
        for name in ("slurmctld.log", *(f"slurmd-{n}.log" for n in NODES), "munged.log"):
            p = self.folder / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in reversed(procs):  # the slurmd first, munged last
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _idle(env: dict[str, str]) -> None:
    """Wait (a while) until no job is left running: a cancelled element unwinds its bench first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        res = subprocess.run(["squeue", "-h", "-t", "R,CG,PD"], env=env, capture_output=True, text=True, check=False)
        if res.returncode != 0 or not res.stdout.strip():
            return
        time.sleep(1)


@contextlib.contextmanager
def cluster(folder: Path) -> Iterator[Cluster]:
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install slurm-wlm munge; make deps)")
    if not Path("/etc/munge/munge.key").is_file():
        pytest.skip("no /etc/munge/munge.key (installing munge makes one)")
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text(_conf(folder, _free_ports(1 + len(NODES))))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs: list[subprocess.Popen[bytes]] = []
    logs = (folder / "daemons.out").open("ab")
    try:
        procs.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={folder}/munge.sock", f"--pid-file={folder}/munged.pid",
             f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed"], stdout=logs, stderr=logs))
        deadline = time.monotonic() + START_TIMEOUT
        while not (folder / "munge.sock").exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, "munged did not start"
            time.sleep(0.1)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env, stdout=logs, stderr=logs))
        for node in NODES:
            procs.append(subprocess.Popen(isolated(["slurmd", "-D", "-N", node, "-f", str(conf)]), env=env,
                                          stdout=logs, stderr=logs))
        c = Cluster(folder, env)
        while True:
            res = subprocess.run(["sinfo", "-h", "-o", "%t %D"], env=env, capture_output=True, text=True, check=False)
            if res.stdout.split() == ["idle", str(len(NODES))]:
                break
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                f"the cluster did not come up: {res.stdout} {res.stderr}\n{c.log()}"
            time.sleep(0.5)
        yield c
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["scancel", "--name=vmharness-campaign"], env=env, timeout=30, check=False)
            _idle(env)
        _stop(procs)
        logs.close()
