"""What a run pays at every guest boot for its commands into the guest, batched as a run batches them
against one command per step, side by side in one guest, in one run.

    .venv/bin/python -m vmharness.host.libvirt.daemon .venv/bin/python benchmarks/guest_round_trips.py [--rounds 5]

One guest of the image under TCG (`vmharness vm up`, which authorizes the harness's key as a run's boot does). Each
round, in alternating order:

- **tuning**: the guest's seed profile planned (its reads in two batches) and applied through the
  agent, then reverted (tune/apply.py: the files in one command each way), against the same writes made
  and put back one command per file, as before the batching;
- **nginx**: the server started and stopped over ssh as a run does (bench/server.py: one command each),
  against the same steps one command each (lay out the prefix, `nginx -t`, start, read the PID file;
  read it again, the master's command line, SIGTERM, its state until it is gone, remove the prefix).

Prints each variant's median seconds and the ratio, and the commands each sent. Needs root, libvirtd
and the image (`make image`); the journal is this host's (/run/vmharness), as in a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from vmharness.bench.server import Server, ServerConfig, prefix_for, render
from vmharness.guest import ssh
from vmharness.host.libvirt import api
from vmharness.model import profile
from vmharness.system import machine as machines
from vmharness.system.machine import Machine, read
from vmharness.system.root import HostRoot
from vmharness.tune import apply, knobs
from vmharness.tune.access import Target, guest_target

NAME = "rtrips"


def _vmh(*args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "vmharness.cli", *args], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise SystemExit(f"vmharness {' '.join(args)} failed: {res.stderr.strip()[-500:]}")
    return res.stdout


class Counted:
    """A target whose commands are counted."""

    def __init__(self, t: Target) -> None:
        self.t, self.n = t, 0
        original = t.runner  # type: ignore[attr-defined]

        def runner(argv: list[str], check: bool) -> Any:
            self.n += 1
            return original(argv, check)

        t.runner = runner  # type: ignore[attr-defined]


def _tuning_batched(root: HostRoot, t: Target) -> None:
    plan = knobs.make(t, profile.load("seeds"), ("eth0",), False)
    made = apply.apply(root, t, plan, lambda _l: None, "bench")
    assert apply.undo(root, made, lambda _l: None) == []


def _tuning_one_by_one(root: HostRoot, t: Target) -> None:
    plan = knobs.make(t, profile.load("seeds"), ("eth0",), False)
    files = [c for c in plan.changes if apply.is_file(c.path)]
    for c in files:
        [got] = t.set_many([(c.path, c.after)])
        assert not isinstance(got, Exception), got
    for c in reversed(files):
        assert t.write_many([(c.path, c.before)]) == [None]


def _nginx_batched(root: HostRoot, m: Machine) -> None:
    srv = Server(m, ServerConfig(listen="0.0.0.0:8080", prefix=prefix_for("bench", "rt")), "run:bench")
    srv.start(root)
    srv.stop(root)


def _nginx_one_by_one(root: HostRoot, m: Machine) -> None:
    cfg = ServerConfig(listen="0.0.0.0:8080", prefix=prefix_for("bench", "rt"))
    p = cfg.prefix
    m.run(["sh", "-c", 'rm -rf -- "$1"; mkdir -p "$1/www" "$1/tmp"; cat > "$1/nginx.conf"; '
           'head -c "$2" /dev/zero | tr "\\0" x > "$1/www/index.bin"', "sh", p, str(cfg.filesize)],
          timeout=60, input=render(cfg))
    argv = ["nginx", "-p", f"{p}/", "-c", f"{p}/nginx.conf"]
    m.run([*argv, "-t"], timeout=60)
    m.run(argv, timeout=60)
    while not (pid := read(m, f"{p}/nginx.pid", limit=64)):
        time.sleep(0.1)
    read(m, f"{p}/nginx.pid", limit=64)
    read(m, f"/proc/{pid}/cmdline")
    m.run(["kill", "-TERM", pid], timeout=60)
    while machines.alive(m, int(pid)):
        time.sleep(0.1)
    m.run(["rm", "-rf", "--", p], timeout=60)


def _timed(variant: Callable[[], None], times: list[float]) -> None:
    began = time.monotonic()
    variant()
    times.append(time.monotonic() - began)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    up = json.loads(_vmh("vm", "up", "--name", NAME, "--memory", "768", "--json"))
    try:
        conn = api.connect("qemu:///system")
        try:
            uuid = conn.lookupByName(f"vmh-{NAME}").UUIDString()  # `vm up` authorized the harness's key
        finally:
            conn.close()
        m = ssh.machine(str(up["link"]["guest"]).split("/")[0], "qemu:///system", bool(up["kvm"]))
        ssh.wait(m, 300)
        root = HostRoot()
        t = Counted(guest_target("qemu:///system", uuid, NAME))
        ssh_runs = {"n": 0}
        original = Machine.run

        def counted_run(self: Machine, *a: Any, **k: Any) -> Any:
            ssh_runs["n"] += self.guest
            return original(self, *a, **k)

        Machine.run = counted_run  # type: ignore[method-assign]
        variants: dict[str, Callable[[], None]] = {
            "tuning, batched": lambda: _tuning_batched(root, t.t),
            "tuning, one command per file": lambda: _tuning_one_by_one(root, t.t),
            "nginx start and stop, batched": lambda: _nginx_batched(root, m),
            "nginx start and stop, one command per step": lambda: _nginx_one_by_one(root, m),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        commands: dict[str, int] = {}
        names = list(variants)
        for r in range(args.rounds):
            for pair in (names[:2], names[2:]):
                for name in (pair if r % 2 == 0 else pair[::-1]):
                    before = t.n + ssh_runs["n"]
                    _timed(variants[name], times[name])
                    commands[name] = t.n + ssh_runs["n"] - before
        print(f"{args.rounds} rounds in one guest under {'KVM' if up['kvm'] else 'TCG'}; median seconds "
              "(commands into the guest per round)")
        for name in names:
            print(f"  {name:45} {statistics.median(times[name]):6.2f} s ({commands[name]} commands)")
        for a, b in (names[:2], names[2:]):
            ratio = statistics.median(times[b]) / statistics.median(times[a])
            print(f"  {a.split(',')[0]}: one command per step takes {ratio:.2f}x the batched time")
        return 0
    finally:
        _vmh("vm", "down", NAME)


if __name__ == "__main__":
    sys.exit(main())
