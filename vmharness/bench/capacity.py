"""What each client can generate, measured before the sweep: wrk, then oha, each for load.capacity
seconds at the sweep's largest count, against a trivial nginx on the client itself (one worker,
serving a file of the size the server under test sends, on its loopback). It is a lower bound, since
the trivial server shares the client's CPUs. The report warns when the server's peak comes within 80%
of it: the numbers may then be the client's, not the server's (seed 003). A client that cannot run the
trivial server (no nginx there, say) gets a record with the error, and the report says it was not
measured."""

from __future__ import annotations

from typing import Any

from vmharness import progress
from vmharness.bench import server
from vmharness.bench.clients import Client, merge, open_runs, run_together, wrk_runs
from vmharness.errors import HarnessError
from vmharness.journal import journal
from vmharness.model.sections import BenchConfig
from vmharness.rundir.store import RunDir
from vmharness.system.root import HostRoot

PORT = 18099  # the trivial nginx's, on each client's loopback


def measure(clients: list[Client], cfg: BenchConfig, run: RunDir, root: HostRoot, owner: str,
            say: progress.Say) -> None:
    """Each client's `capacity` record, once per run and machine."""
    if not cfg.load.capacity:
        return
    have = {r.get("machine") for r in run.records() if r.get("kind") == "capacity"}
    for n, c in enumerate(clients):
        if c.machine.label not in have:
            say(f"client {c.machine.label}: measuring what it generates against nginx on itself "
                f"({cfg.load.capacity} s each)")
            rec = _measure_one(c, f"capacity{n}", cfg, root, owner)
            run.append(rec)
            said = rec["error"] or ", ".join(f"{k} {rec[k + '_per_s']:,.0f} req/s" for k in ("closed", "open")
                                             if rec[k + "_per_s"] is not None)
            say(f"client {c.machine.label} generates, against nginx on itself: {said}")


def _measure_one(c: Client, name: str, cfg: BenchConfig, root: HostRoot, owner: str) -> dict[str, Any]:
    secs, s, conns = cfg.load.capacity, cfg.sweep, max(cfg.counts)
    url = f"http://127.0.0.1:{PORT}/"
    rec: dict[str, Any] = {"kind": "capacity", "machine": c.machine.label, "connections": conns, "seconds": secs,
                           "closed_per_s": None, "open_per_s": None, "error": None}
    srv = server.Server(c.machine, server.ServerConfig(
        workers=1, worker_connections=conns + 64, filesize=cfg.server.filesize, listen=f"127.0.0.1:{PORT}",
        prefix=server.prefix_for(owner.removeprefix(journal.RUN_PREFIX), name)), owner)
    try:
        srv.start(root)
        got = merge(run_together(wrk_runs([c], url, conns, secs, s.timeout), s.margin)[0])
        rec["closed_per_s"] = got["requests_per_s"] if got["ok"] else None
        if got["ok"] and cfg.load.percents:
            got = merge(run_together(open_runs([c], url, conns, 0, secs, s.timeout), s.margin)[0])
            rec["open_per_s"] = got["requests_per_s"] if got["ok"] else None
        if not got["ok"]:
            rec["error"] = "; ".join(got["errors"])
    except HarnessError as exc:
        rec["error"] = exc.message
    finally:
        srv.stop(root)
    return rec
