"""The rig's agent client against an agent that goes silent: a command whose status is never answered
ends after the client's `silence`, saying which request went unanswered, not after the command's whole
timeout (a quiet clean clone's nested run once waited 40 minutes on one poll). The agent here is a
socket that speaks the agent's framing; the real one is tested in tests/integration/test_rig.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.rig.qga import AgentError, GuestAgent


@contextmanager
def _agent(path: Path, answer_status: bool) -> Iterator[None]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, conn.makefile("rb") as lines:
            for raw in lines:
                request = json.loads(raw.strip(b"\xff"))
                command, args = request["execute"], request.get("arguments", {})
                if command == "guest-sync-delimited":
                    reply: object = args["id"]
                elif command == "guest-exec":
                    reply = {"pid": 7}
                elif answer_status:
                    reply = {"exited": True, "exitcode": 0, "out-data": "b2sK"}  # "ok\n"
                else:
                    continue  # silent: a hung agent
                conn.sendall(json.dumps({"return": reply}).encode() + b"\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield
    finally:
        server.close()


@pytest.mark.parametrize("answer_status", [True, False], ids=["answering", "silent"])
def test_a_silent_agent_ends_the_command_after_the_silence_not_its_timeout(tmp_path: Path,
                                                                          answer_status: bool) -> None:
    path = tmp_path / "agent.sock"
    agent = GuestAgent(path, silence=1.0)
    began = time.monotonic()
    with _agent(path, answer_status):
        agent.connect(timeout=10)
        try:
            if answer_status:
                assert agent.exec(["true"], env={}, timeout=600).stdout == "ok\n"
            else:
                with pytest.raises(AgentError, match="did not answer guest-exec-status within 1 s"):
                    agent.exec(["sleep", "1000"], env={}, timeout=600)
        finally:
            agent.close()
    assert time.monotonic() - began < 60  # the command's own 600 s would be a hang
