"""Synthetic profiled points for the profile tests: a run folder's profiles/NAME.folded in inferno's folded
form and the "profile" record that names it, with counts in samples of a 1 ms period (1000 Hz)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

PERIOD = 1_000_000  # ns: one sample at 1000 Hz
ENTER = "nginx;ngx_worker;recv;entry_SYSCALL_64_[k];do_syscall_64_[k];syscall_enter_from_user_mode_[k]"
READ = "nginx;ngx_worker;recv;entry_SYSCALL_64_[k];do_syscall_64_[k];tcp_recvmsg_[k]"
PARSE = "nginx;ngx_worker;ngx_http_parse_request_line"
WRITE = "nginx;ngx_worker;writev"
SOFTIRQ = "ksoftirqd/0;ret_from_fork_[k];net_rx_action_[k]"
IDLE = "swapper;start_kernel_[k];cpu_startup_entry_[k];do_idle_[k];default_idle_call_[k];native_safe_halt_[k]"
IDLE_IRQ = ("swapper;start_kernel_[k];cpu_startup_entry_[k];do_idle_[k];default_idle_call_[k];"
            "asm_sysvec_apic_timer_interrupt_[k];sysvec_apic_timer_interrupt_[k];__irq_exit_rcu_[k];"
            "handle_softirqs_[k];net_rx_action_[k]")
BASE = {ENTER: 300, READ: 2000, PARSE: 3000, WRITE: 1500, SOFTIRQ: 700, IDLE: 20000, IDLE_IRQ: 500}


def text(stacks: dict[str, float]) -> str:
    return "".join(f"{s} {round(n * PERIOD)}\n" for s, n in stacks.items())


def scaled(stacks: dict[str, int], factor: float, **planted: float) -> dict[str, float]:
    """Every stack's samples times `factor`, the idle loop's kept; `planted`: a stack's own factor on top."""
    names = {"enter": ENTER, "read": READ, "parse": PARSE}
    by = {names[k]: v for k, v in planted.items()}
    return {s: n * (1 if s == IDLE else factor) * by.get(s, 1.0) for s, n in stacks.items()}


def record(inst: str, requests: int, rps: float, file: str | None = None, digest: str | None = None,
           it: int = 0, conns: int = 8) -> dict[str, Any]:
    return {"kind": "profile", "key": f"{inst}/profile/{it}", "instance": inst, "connections": conns,
            "iteration": it, "ok": True, "attempts": 1,
            "client": {"requests": requests, "requests_per_s": rps, "duration_s": 3.0},
            "profile": {"file": file or f"profiles/{inst}-{it}.folded", "sha256": digest or "0" * 64,
                        "bytes": 1, "frequency": 1000}}


def write(run: Path, inst: str, stacks: dict[str, float], requests: int, rps: float, it: int = 0,
          conns: int = 8) -> dict[str, Any]:
    """The profile's file in `run`/profiles/ and its record."""
    data = text(stacks).encode()
    (run / "profiles").mkdir(parents=True, exist_ok=True)
    (run / "profiles" / f"{inst}-{it}.folded").write_bytes(data)
    rec = record(inst, requests, rps, digest=hashlib.sha256(data).hexdigest(), it=it, conns=conns)
    rec["profile"]["bytes"] = len(data)
    return rec


def measurement(inst: str, conns: int, it: int, rps: float) -> dict[str, Any]:
    return {"kind": "measurement", "key": f"{inst}/{conns}/{it}", "instance": inst, "connections": conns,
            "iteration": it, "ok": True,
            "client": {"requests_per_s": rps, "requests": int(rps * 10), "errors": {"total": 0},
                       "latency_us": {"percentiles": {"50": 10, "90": 20, "99": 40, "99.9": 80}}}}
